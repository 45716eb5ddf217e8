"""The promote gates (``--pause-before switch|teardown`` and ``cutover rollout promote``), and
pause and resume, in the rollout's phase machine."""

from __future__ import annotations

from datetime import timedelta

from rollout_support import SWITCH, T0, observe, part, record, spec

from cutover.rollout.events import CompareDone, PublishSwitch, Requested, Step, StopOld, Tick
from cutover.rollout.journal import CompareCounts, CompareSummary, Gate, Phase, RequestKind
from cutover.rollout.machine import next_gate, step

NOW = T0 + timedelta(seconds=10)
CAUGHT_UP = (part(40_000, 35_000), part(41_000, 39_000))
CLEAR = (part(51_000, 52_000, epoch=2, boundary=50_000),
         part(51_000, 52_000, epoch=2, boundary=50_000))


def tick(rec: object, *parts: object, **kw: object) -> Step:
    return step(rec, Tick(observe(*parts, **kw)), NOW)  # type: ignore[arg-type]


def promote(rec: object) -> Step:
    return step(rec, Requested(RequestKind.PROMOTE, "ops@ci"), NOW)  # type: ignore[arg-type]


def test_caught_up_it_waits_before_the_switch_until_promoted() -> None:
    rec = record(Phase.CATCHING_UP, spec=spec(pause_before=("switch",)))
    waiting = tick(rec, *CAUGHT_UP)
    assert waiting.record.phase is Phase.CATCHING_UP and waiting.actions == ()
    assert waiting.record.waiting_at is Gate.SWITCH
    assert "promote with `cutover rollout promote --route r`" in waiting.record.note
    assert tick(waiting.record, *CAUGHT_UP).actions == ()          # it stays there
    promoted = promote(waiting.record).record
    assert promoted.promoted == (Gate.SWITCH,) and promoted.waiting_at is None
    go = tick(promoted, *CAUGHT_UP)
    assert go.record.phase is Phase.SWITCHING
    assert go.actions == (PublishSwitch(rec.deadline_at),)


def test_a_passed_comparison_waits_before_the_switch_until_promoted() -> None:
    rec = record(Phase.COMPARING, spec=spec(compare=True, pause_before=("switch",)))
    passed = CompareSummary(old="blue", new="green", partitions={0: CompareCounts(equal=10)},
                            ranges={0: (0, 1)}, max_diff=0.01)
    waiting = step(rec, CompareDone(passed), NOW)
    assert waiting.record.phase is Phase.COMPARING and waiting.record.waiting_at is Gate.SWITCH
    assert tick(waiting.record, *CAUGHT_UP).actions == ()
    go = tick(promote(waiting.record).record, *CAUGHT_UP)
    assert go.record.phase is Phase.SWITCHING and go.actions == (PublishSwitch(rec.deadline_at),)


def test_at_clear_to_teardown_it_waits_before_stopping_the_old_version() -> None:
    rec = record(Phase.DRAINING, spec=spec(pause_before=("teardown",), deadline_ms=15_000))
    waiting = tick(rec, *CLEAR, plan=SWITCH)
    assert waiting.record.phase is Phase.DRAINING and waiting.record.waiting_at is Gate.TEARDOWN
    # past the deadline: the transition is clear, so waiting here is no reason to roll back
    late = step(waiting.record, Tick(observe(*CLEAR, plan=SWITCH, at=60)), NOW)
    assert late.record.phase is Phase.DRAINING
    go = tick(promote(waiting.record).record, *CLEAR, plan=SWITCH)
    assert go.record.phase is Phase.TEARING_DOWN and go.actions == (StopOld(),)


def test_a_promote_before_the_gate_lets_the_rollout_pass_it_without_waiting() -> None:
    rec = record(Phase.CATCHING_UP, spec=spec(pause_before=("switch", "teardown")))
    assert next_gate(rec) is Gate.SWITCH
    early = promote(rec).record
    assert early.promoted == (Gate.SWITCH,) and next_gate(early) is Gate.TEARDOWN
    assert tick(early, *CAUGHT_UP).record.phase is Phase.SWITCHING


def test_a_promote_without_a_gate_changes_nothing() -> None:
    rec = record(Phase.CATCHING_UP)
    assert promote(rec).record == rec


def test_a_paused_rollout_takes_no_step_forward_until_resumed() -> None:
    rec = record(Phase.CATCHING_UP)
    paused = step(rec, Requested(RequestKind.PAUSE, "ops@ci"), NOW).record
    assert paused.paused_by == "ops@ci" and "resume with `cutover rollout resume" in paused.note
    held = tick(paused, *CAUGHT_UP)
    assert held.record.phase is Phase.CATCHING_UP and held.actions == ()
    resumed = step(paused, Requested(RequestKind.RESUME, "ops@ci"), NOW).record
    assert resumed.paused_by is None
    assert tick(resumed, *CAUGHT_UP).record.phase is Phase.SWITCHING


def test_a_paused_rollout_still_rolls_back_when_the_new_version_exits_or_the_deadline_passes(
) -> None:
    from rollout_support import GONE
    paused = step(record(Phase.CATCHING_UP, spec=spec(deadline_ms=5_000)),
                  Requested(RequestKind.PAUSE, "ops"), NOW).record
    assert tick(paused, *CAUGHT_UP).record.phase is Phase.ROLLING_BACK
    paused = step(record(Phase.CATCHING_UP), Requested(RequestKind.PAUSE, "ops"), NOW).record
    assert tick(paused, *CAUGHT_UP, new=GONE).record.phase is Phase.ROLLING_BACK
