"""The sentences a rollout ends with: what happened and what consumers saw, with event times
as an operator reads them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from cutover.rollout.events import Observation, RouteFacts
from cutover.rollout.journal import RolloutRecord


def dur(ms: int | float) -> str:
    """A duration as an operator reads it (45s, 2m05s, 1h10m)."""
    s = int(ms / 1000)
    if s < 120:
        return f"{s}s" if s >= 1 or ms == 0 else f"{int(ms)}ms"
    return f"{s // 60}m{s % 60:02d}s" if s < 7200 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def at(ms: int | None) -> str:
    """An event time as an operator reads it (UTC, to the millisecond)."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _partitions_from(bounds: Mapping[int, int]) -> str:
    return ", ".join(f"partition {p} from {at(b)}" for p, b in bounds.items())


def _elapsed(rec: RolloutRecord, now: datetime) -> str:
    return dur((now - rec.started_at).total_seconds() * 1000)


def succeeded(rec: RolloutRecord, obs: Observation) -> str:
    s = rec.spec
    pins = {p: f.boundary for p, f in obs.route.partitions.items()
            if f.boundary is not None and f.boundary != rec.switch_boundary}
    where = f" (pinned: {_partitions_from(pins)})" if pins else ""
    return (f"rollout of route {rec.route} to {s.new} done in {_elapsed(rec, obs.now)}: {s.new} "
            f"is primary from event time {at(rec.switch_boundary)}{where}, {s.old} was stopped at "
            f"CLEAR_TO_TEARDOWN; consumers saw {s.old}'s records below the boundary and "
            f"{s.new}'s from it, each exactly once")


def rolled_back(rec: RolloutRecord, route: RouteFacts) -> str:
    s, rb = rec.spec, rec.rollback
    assert rb is not None
    head = f"rollout of route {rec.route} to {s.new} rolled back: {rb.reason}. "
    kept = {p: f.boundary for p, f in sorted(route.partitions.items())
            if rec.switch_epoch is not None and f.pinned and f.boundary is not None}
    if rec.switch_epoch is None:
        return head + (f"Nothing was switched: consumers saw only {s.old}'s records, each once; "
                       f"{s.new} was stopped")
    if not kept:
        return head + (f"{s.old} is primary again for every event time (the router had "
                       f"forwarded nothing of {s.new}'s yet): consumers saw only {s.old}'s "
                       f"records, each once; {s.new} was stopped")
    return head + (f"{s.old} is primary again ({_partitions_from(kept)}); before that {s.new} "
                   f"kept the event times from {at(rec.switch_boundary)} that the router had "
                   f"already given it, and emitted all of them: consumers saw every record "
                   f"once, {s.old}'s below {at(rec.switch_boundary)}, {s.new}'s up to the "
                   f"rollback boundary, {s.old}'s from it; {s.new} was stopped")


def gap(rec: RolloutRecord, owed: Mapping[int, int], route: RouteFacts) -> str:
    s, rb = rec.spec, rec.rollback
    assert rb is not None
    ranges = "; ".join(f"partition {p}: [{at(route.partitions[p].watermarks.get(s.new))}, "
                       f"{at(b)})" for p, b in owed.items())
    return (f"rollout of route {rec.route} to {s.new} could not be rolled back cleanly: "
            f"{rb.reason}. The router had already given {s.new} the event times from "
            f"{at(rec.switch_boundary)} up to the rollback boundary, and {s.new} (restarted "
            f"{rb.restarts} times) never emitted all of them within "
            f"{dur(s.rollback_timeout_ms)}: consumers miss {s.new}'s records of event times "
            f"{ranges}, and with ordered handover {s.old}'s records from the boundary on wait "
            f"behind them. Start {s.new} again (it resumes from its checkpoint) to deliver "
            f"them; {s.new} was stopped")


def rollback_unapplied(rec: RolloutRecord, behind: list[int]) -> str:
    return (f"rollout of route {rec.route} to {rec.spec.new} could not be rolled back: "
            f"{rec.rollback.reason if rec.rollback else ''}; partitions {behind} did not apply "
            f"the rollback plan within {dur(rec.spec.rollback_timeout_ms)}: is a router "
            f"running for every partition? Both versions were left running")


def old_not_passing(rec: RolloutRecord, unsteady: list[str]) -> str:
    s = rec.spec
    return (f"rollout of route {rec.route} to {s.new} was rolled back but {s.old} did not pass "
            f"the rollback boundary within {dur(s.rollback_timeout_ms)} "
            f"({'; '.join(unsteady[:3])}): is {s.old} running? Nothing was lost: the router "
            f"holds back and delivers {s.old}'s records once it progresses; {s.new} was stopped")


def stop_old_failed(rec: RolloutRecord, code: int) -> str:
    s = rec.spec
    return (f"rollout of route {rec.route} to {s.new}: {s.new} is primary and it was clear to "
            f"tear {s.old} down, but the stop command exited with code {code} (see "
            f"{s.log_dir}); {s.old} may still run, harmlessly (its records are suppressed): "
            "stop it by hand")


def soak_failed(rec: RolloutRecord, obs: Observation) -> str:
    s = rec.spec
    code = f" with code {obs.new.exit_code}" if obs.new.exit_code is not None else ""
    return (f"rollout of route {rec.route} to {s.new}: {s.new} exited{code} during the soak, "
            f"after {s.old} was stopped; consumers have every record up to {s.new}'s last "
            f"watermark and nothing after it until {s.new} runs again: restart it (it resumes "
            f"from its checkpoint), or start {s.old} and `cutover rollout --to {s.old}`")
