"""What the rollout tests share: a journal record at the start, and observations of a route
built from short descriptions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rule_support import make_plan

from cutover.plan import CutoverPlan
from cutover.readiness import PartitionProgress, readiness
from cutover.rollout.events import (
    NewProcess,
    Observation,
    PartitionFacts,
    ProcState,
    RouteFacts,
)
from cutover.rollout.journal import (
    Owner,
    Phase,
    PhaseSpan,
    ProcessRef,
    RolloutRecord,
    RolloutSpec,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE = make_plan(1, (None, "blue"))
SWITCH = make_plan(2, (None, "blue"), (50_000, "green"))
ROLLBACK = make_plan(3, (None, "blue"))
ALIVE = NewProcess(state=ProcState.ALIVE)
GONE = NewProcess(state=ProcState.GONE, exit_code=1)
REF = ProcessRef(pid=4242, host="h", start_ticks=7, log="var/green.log", started_at=T0)


def spec(**over: object) -> RolloutSpec:
    base: dict[str, object] = dict(
        route="r", old="blue", new="green", start="run green", stop_old="stop blue",
        catch_up_lag_ms=30_000, deadline_ms=900_000, soak_ms=60_000, log_dir="var/rollout/r")
    base.update(over)
    return RolloutSpec.model_validate(base)


def record(phase: Phase = Phase.STARTING_NEW, **over: object) -> RolloutRecord:
    s = over.pop("spec", None) or spec()
    assert isinstance(s, RolloutSpec)
    fields: dict[str, object] = dict(
        route="r", run_id="run1", claim=1, owner=Owner(token="t", host="h", pid=1), spec=s,
        phase=phase, phases=(PhaseSpan(phase=phase, started_at=T0),), started_at=T0,
        deadline_at=T0 + timedelta(milliseconds=s.deadline_ms), base_plan=BASE,
        new_process=None if phase is Phase.STARTING_NEW else REF)
    if phase in (Phase.DRAINING, Phase.TEARING_DOWN, Phase.SOAKING):
        fields.update(switch_epoch=2, switch_boundary=50_000)
    fields.update(over)
    return RolloutRecord.model_validate(fields)


def part(blue: int | None = None, green: int | None = None, *, epoch: int = 1,
         boundary: int | None = None, horizon: int | None = None, pinned: tuple[int, ...] = (),
         held: int = 0) -> PartitionFacts:
    marks = {v: wm for v, wm in (("blue", blue), ("green", green)) if wm is not None}
    return PartitionFacts(epoch=epoch, boundary=boundary, horizon=horizon, watermarks=marks,
                          pinned=pinned, held=held)


def observe(*parts: PartitionFacts, plan: CutoverPlan | None = BASE, at: float = 10.0,
            new: NewProcess = ALIVE, compare_running: bool = False) -> Observation:
    """The route as seen ``at`` seconds after T0, its transition computed as a reader would."""
    now = T0 + timedelta(seconds=at)
    progress = {p: PartitionProgress(epoch=f.epoch, boundary=f.boundary,
                                     watermarks=f.watermarks, held=f.held)
                for p, f in enumerate(parts)}
    tr = readiness(plan, progress, len(parts), now)
    return Observation(now=now, new=new, compare_running=compare_running,
                       route=RouteFacts(plan=plan, num_partitions=len(parts),
                                        partitions=dict(enumerate(parts)), transition=tr))
