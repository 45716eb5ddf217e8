"""The rollout's phase machine (cutover.rollout.machine): every transition, the actions each
phase asks for, and that every step can be repeated after a crash."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollout_support import (
    BASE,
    GONE,
    REF,
    ROLLBACK,
    SWITCH,
    T0,
    observe,
    part,
    record,
    spec,
)
from rule_support import make_plan

from cutover.rollout.events import (
    AbortRequested,
    CompareDone,
    CompareFailed,
    NewProcess,
    NewRestarted,
    NewStarted,
    NewStopped,
    OldStopped,
    ProcState,
    PublishRollback,
    PublishSwitch,
    RestartNew,
    RollbackPublished,
    StartCompare,
    StartFailed,
    StartNew,
    Step,
    StopNew,
    StopOld,
    SwitchPublished,
    SwitchRefused,
    Tick,
)
from cutover.rollout.journal import (
    CompareCounts,
    CompareSummary,
    Phase,
    RollbackState,
    RolloutRecord,
    Trigger,
)
from cutover.rollout.machine import MAX_RESTARTS, step

NOW = T0 + timedelta(seconds=10)
CAUGHT_UP = (part(40_000, 35_000), part(41_000, 39_000))


def tick(rec: RolloutRecord, *parts: object, **kw: object) -> Step:
    obs = observe(*parts, **kw)  # type: ignore[arg-type]
    return step(rec, Tick(obs), obs.now)


def summary(equal: int, different: int, max_diff: float = 0.001) -> CompareSummary:
    return CompareSummary(old="blue", new="green",
                          partitions={0: CompareCounts(equal=equal, different=different)},
                          ranges={0: (1, 100)}, max_diff=max_diff)


def rolling_back(trigger: Trigger = Trigger.STALLED, *, switched: bool = True,
                 **rb: object) -> RolloutRecord:
    state = RollbackState(trigger=trigger, reason="the switch stalled", started_at=NOW, **rb)
    extra = {"switch_epoch": 2, "switch_boundary": 50_000} if switched else {}
    return record(Phase.ROLLING_BACK, rollback=state, **extra)


# -- STARTING_NEW -------------------------------------------------------------------------------


def test_a_new_rollout_starts_the_new_version_then_watches_it_catch_up() -> None:
    rec = record()
    first = tick(rec, *CAUGHT_UP)
    assert first.actions == (StartNew(),) and first.record == rec
    started = step(rec, NewStarted(REF), NOW)
    assert started.record.phase is Phase.CATCHING_UP and started.record.new_process == REF
    assert [s.phase for s in started.record.phases] == [Phase.STARTING_NEW, Phase.CATCHING_UP]
    assert started.record.phases[0].ended_at == NOW and started.record.phases[1].ended_at is None
    assert "pid 4242" in started.record.note


def test_resumed_in_starting_new_with_the_process_alive_it_is_not_started_twice() -> None:
    s = tick(record(new_process=REF), *CAUGHT_UP)
    assert s.record.phase is Phase.CATCHING_UP and s.actions == ()


def test_a_start_command_that_cannot_run_rolls_back_with_nothing_switched() -> None:
    s = step(record(), StartFailed("/bin/sh: not found"), NOW)
    assert s.record.phase is Phase.ROLLING_BACK
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.START_FAILED
    assert "not found" in s.record.note


@pytest.mark.parametrize("phase", [Phase.STARTING_NEW, Phase.CATCHING_UP, Phase.COMPARING,
                                   Phase.SWITCHING])
def test_the_new_version_exiting_before_teardown_rolls_back(phase: Phase) -> None:
    s = tick(record(phase, new_process=REF), *CAUGHT_UP, new=GONE)
    assert s.record.phase is Phase.ROLLING_BACK
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.NEW_EXITED
    assert "exited with code 1" in s.record.note


# -- CATCHING_UP --------------------------------------------------------------------------------


def test_catching_up_waits_for_every_partition_within_the_lag() -> None:
    rec = record(Phase.CATCHING_UP)
    s = tick(rec, part(40_000, 35_000), part(41_000, 5_000))
    assert s.record.phase is Phase.CATCHING_UP and s.actions == ()
    assert s.record.note == "partition 1: green 36s behind blue (allowed 30s)"
    s = tick(rec, part(40_000, 35_000), part(41_000))
    assert s.record.note == "partition 1: no watermark of green yet"
    s = tick(rec, part(40_000, 35_000), part(41_000, 39_000))
    assert s.record.phase is Phase.SWITCHING
    assert s.actions == (PublishSwitch(rec.deadline_at),)
    assert s.record.note == "green within 30s of blue on all 2 partitions"


def test_caught_up_with_compare_starts_the_comparison() -> None:
    s = tick(record(Phase.CATCHING_UP, spec=spec(compare=True)), *CAUGHT_UP)
    assert s.record.phase is Phase.COMPARING and s.actions == (StartCompare(),)


def test_a_route_without_router_status_is_not_caught_up() -> None:
    s = tick(record(Phase.CATCHING_UP))
    assert s.record.phase is Phase.CATCHING_UP and s.record.note == "no router status yet"


# -- COMPARING ----------------------------------------------------------------------------------


def test_comparing_asks_for_a_comparison_only_while_none_runs() -> None:
    rec = record(Phase.COMPARING, spec=spec(compare=True))
    assert tick(rec, *CAUGHT_UP).actions == (StartCompare(),)   # resumed: start it again
    assert tick(rec, *CAUGHT_UP, compare_running=True).actions == ()


def test_a_passed_comparison_switches_a_failed_one_rolls_back_before_any_switch() -> None:
    rec = record(Phase.COMPARING, spec=spec(compare=True))
    ok = step(rec, CompareDone(summary(999, 1)), NOW)
    assert ok.record.phase is Phase.SWITCHING and ok.record.compare == summary(999, 1)
    assert ok.actions == (PublishSwitch(rec.deadline_at),)
    bad = step(rec, CompareDone(summary(990, 10)), NOW)
    assert bad.record.phase is Phase.ROLLING_BACK and bad.actions == ()
    assert bad.record.rollback is not None and bad.record.rollback.trigger is Trigger.COMPARE
    assert "10 different" in bad.record.note and "1.00% differ, limit 0.10%" in bad.record.note
    broken = step(rec, CompareFailed("raw topic 'x' does not exist"), NOW)
    assert broken.record.phase is Phase.ROLLING_BACK
    assert "could not run: raw topic" in broken.record.note


def test_a_comparison_with_nothing_in_common_fails() -> None:
    empty = CompareSummary(old="blue", new="green", partitions={}, ranges={}, max_diff=1.0)
    assert not empty.passed and "compare for longer" in empty.headline()


# -- SWITCHING ----------------------------------------------------------------------------------


def test_switching_publishes_until_the_plan_is_taken() -> None:
    rec = record(Phase.SWITCHING)
    assert tick(rec, *CAUGHT_UP).actions == (PublishSwitch(rec.deadline_at),)
    refused = step(rec, SwitchRefused("version 'green' lags on partition 1"), NOW)
    assert refused.record.phase is Phase.SWITCHING and "lags" in refused.record.note
    done = step(rec, SwitchPublished(2, 50_000), NOW)
    assert done.record.phase is Phase.DRAINING
    assert (done.record.switch_epoch, done.record.switch_boundary) == (2, 50_000)


def test_a_switch_published_by_a_run_that_died_is_adopted_not_published_again() -> None:
    s = tick(record(Phase.SWITCHING), *CAUGHT_UP, plan=SWITCH)
    assert s.actions == () and s.record.phase is Phase.DRAINING
    assert (s.record.switch_epoch, s.record.switch_boundary) == (2, 50_000)


# -- DRAINING -----------------------------------------------------------------------------------


def test_draining_waits_for_clear_to_teardown_then_stops_the_old_version() -> None:
    rec = record(Phase.DRAINING)
    pending = tick(rec, part(45_000, 52_000, epoch=2, boundary=50_000),
                   part(51_000, 52_000, epoch=2, boundary=50_000), plan=SWITCH)
    assert pending.record.phase is Phase.DRAINING and pending.actions == ()
    assert "old version 'blue' at watermark 45000, needs 50000" in pending.record.note
    clear = tick(rec, part(51_000, 52_000, epoch=2, boundary=50_000),
                 part(51_000, 52_000, epoch=2, boundary=50_000), plan=SWITCH)
    assert clear.record.phase is Phase.TEARING_DOWN and clear.actions == (StopOld(),)


def test_a_stalled_switch_rolls_back() -> None:
    plan = SWITCH.model_copy(update={"deadline": T0 + timedelta(seconds=5)})
    s = tick(record(Phase.DRAINING), part(51_000, 45_000, epoch=2, boundary=50_000),
             plan=plan)
    assert s.record.phase is Phase.ROLLING_BACK
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.STALLED
    assert "new version 'green' at watermark 45000" in s.record.note


def test_the_deadline_rolls_back_whatever_the_phase_before_teardown() -> None:
    for phase in (Phase.CATCHING_UP, Phase.DRAINING):
        rec = record(phase, spec=spec(deadline_ms=5_000))
        plan = SWITCH if phase is Phase.DRAINING else BASE
        s = tick(rec, part(51_000, 1_000, epoch=plan.epoch), plan=plan)
        assert s.record.phase is Phase.ROLLING_BACK, phase
        assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.DEADLINE
        assert s.record.note.startswith(f"the deadline (5s) passed in {phase.value} (")


def test_a_plan_changed_by_someone_else_stops_the_rollout() -> None:
    other = make_plan(3, (None, "blue"), (60_000, "red"))
    s = tick(record(Phase.DRAINING), *CAUGHT_UP, plan=other)
    assert s.record.phase is Phase.FAILED and s.actions == ()
    assert s.record.outcome is not None and "expected epoch 2, found epoch 3" in s.record.outcome
    s = tick(record(Phase.CATCHING_UP), *CAUGHT_UP, plan=SWITCH)
    assert s.record.phase is Phase.FAILED



def test_a_state_read_before_the_rollout_s_own_plan_is_not_a_foreign_plan() -> None:
    """Epochs only grow: an older plan (or none) seen while draining is a read from before
    the switch was published, not a change by someone else; the rollout waits for the next."""
    for plan in (BASE, None):
        s = tick(record(Phase.DRAINING), *CAUGHT_UP, plan=plan)
        assert s.record.phase is Phase.DRAINING and s.actions == (), plan
    s = tick(record(Phase.CATCHING_UP), *CAUGHT_UP, plan=None)
    assert s.record.phase is not Phase.FAILED

# -- TEARING_DOWN, SOAKING, DONE ----------------------------------------------------------------


def test_teardown_then_soak_then_done() -> None:
    rec = record(Phase.TEARING_DOWN)
    assert tick(rec, *CAUGHT_UP, plan=SWITCH).actions == (StopOld(),)   # resumed: run it again
    soak = step(rec, OldStopped(0), NOW)
    assert soak.record.phase is Phase.SOAKING
    early = tick(soak.record, *CAUGHT_UP, plan=SWITCH, at=30)
    assert early.record.phase is Phase.SOAKING
    done = tick(soak.record, part(55_000, 70_000, epoch=2, boundary=50_000), plan=SWITCH,
                at=75)
    assert done.record.phase is Phase.DONE and done.record.outcome is not None
    assert done.record.outcome.startswith(
        "rollout of route r to green done in 75s: green is primary from event time "
        "1970-01-01T00:00:50.000Z, blue was stopped")
    assert done.record.phases[-1].phase is Phase.SOAKING and done.record.phases[-1].ended_at


def test_a_failing_stop_command_fails_the_rollout_with_what_to_do() -> None:
    s = step(record(Phase.TEARING_DOWN), OldStopped(1), NOW)
    assert s.record.phase is Phase.FAILED and s.record.outcome is not None
    assert "exited with code 1" in s.record.outcome and "stop it by hand" in s.record.outcome


def test_the_new_version_exiting_during_the_soak_fails_without_rollback() -> None:
    s = tick(record(Phase.SOAKING), *CAUGHT_UP, plan=SWITCH, new=GONE)
    assert s.record.phase is Phase.FAILED and s.actions == ()
    assert s.record.outcome is not None and "restart it" in s.record.outcome


def test_terminal_phases_take_no_event() -> None:
    for phase in (Phase.DONE, Phase.ROLLED_BACK, Phase.FAILED):
        rec = record(phase, new_process=REF)
        for event in (Tick(observe(*CAUGHT_UP)), AbortRequested("ops"), NewStopped(),
                      OldStopped(0)):
            assert step(rec, event, NOW) == Step(rec)


# -- ROLLING_BACK -------------------------------------------------------------------------------


def test_abort_rolls_back_until_the_old_version_is_stopped() -> None:
    for phase in (Phase.CATCHING_UP, Phase.COMPARING, Phase.SWITCHING, Phase.DRAINING):
        s = step(record(phase), AbortRequested("ops@h"), NOW)
        assert s.record.phase is Phase.ROLLING_BACK and s.record.note == "aborted by ops@h"
    for phase in (Phase.TEARING_DOWN, Phase.SOAKING, Phase.ROLLING_BACK):
        rec = rolling_back() if phase is Phase.ROLLING_BACK else record(phase)
        assert step(rec, AbortRequested("ops"), NOW) == Step(rec)


def test_a_rollback_before_the_switch_stops_the_new_version_and_is_done() -> None:
    rec = rolling_back(Trigger.COMPARE, switched=False)
    s = tick(rec, *CAUGHT_UP)
    assert s.actions == (StopNew(),) and s.record.phase is Phase.ROLLING_BACK
    stopped = step(s.record, NewStopped(), NOW)
    done = tick(stopped.record, *CAUGHT_UP)
    assert done.record.phase is Phase.ROLLED_BACK and done.actions == ()
    assert done.record.outcome is not None
    assert "Nothing was switched: consumers saw only blue's records" in done.record.outcome


def test_a_rollback_after_the_switch_publishes_the_old_timeline_and_waits_for_it() -> None:
    rec = rolling_back(Trigger.ABORT)
    s = tick(rec, *CAUGHT_UP, plan=SWITCH)
    assert s.actions == (PublishRollback(BASE.segments),)
    published = step(s.record, RollbackPublished(3), NOW).record
    assert published.rollback is not None and published.rollback.epoch == 3
    waiting = tick(published, part(45_000, 45_000, epoch=3), part(45_000, 45_000, epoch=2),
                   plan=ROLLBACK)
    assert waiting.actions == () and "partitions [1] to apply" in waiting.record.note
    # not pinned anywhere: no event time was given to green yet
    applied = tick(published, part(45_000, 45_000, epoch=3), part(45_000, 45_000, epoch=3),
                   plan=ROLLBACK)
    assert applied.actions == (StopNew(),)
    done = tick(step(applied.record, NewStopped(), NOW).record,
                part(46_000, epoch=3), part(46_000, epoch=3), plan=ROLLBACK)
    assert done.record.phase is Phase.ROLLED_BACK and done.record.outcome is not None
    assert "blue is primary again for every event time" in done.record.outcome


def test_a_rollback_plan_published_by_a_run_that_died_is_adopted() -> None:
    s = tick(rolling_back(), part(45_000, epoch=3), plan=ROLLBACK)
    assert s.record.rollback is not None and s.record.rollback.epoch == 3
    assert PublishRollback(BASE.segments) not in s.actions


PIN = 60_001   # the router had decided up to 60000 when the rollback plan arrived


def pinned(blue: int, green: int, held: int = 0) -> object:
    return part(blue, green, epoch=3, boundary=PIN, pinned=(PIN,), held=held)


def test_a_stuck_new_version_owing_records_is_restarted_once_at_once() -> None:
    rec = rolling_back(Trigger.STALLED, epoch=3)
    s = tick(rec, pinned(62_000, 52_000, held=40), plan=ROLLBACK)
    assert s.actions == (RestartNew(),)
    assert "partition 0: watermark 1970-01-01T00:00:52.000Z, needs 1970-01-01T00:01:00.001Z" \
        in s.record.note
    restarted = step(s.record, NewRestarted(REF.model_copy(update={"pid": 5})), NOW).record
    assert restarted.rollback is not None and restarted.rollback.restarts == 1
    assert restarted.new_process is not None and restarted.new_process.pid == 5
    # progressing after the restart: waited for, not restarted again
    later = tick(restarted, pinned(62_000, 55_000, held=40), plan=ROLLBACK, at=40)
    assert later.actions == ()
    # no progress for --stuck-after (3 minutes by default): restarted again, up to the limit
    assert tick(later.record, pinned(62_000, 55_000, held=40), plan=ROLLBACK,
                at=40 + 179).actions == ()
    stuck = tick(later.record, pinned(62_000, 55_000, held=40), plan=ROLLBACK, at=40 + 180)
    assert stuck.actions == (RestartNew(),)
    limit = later.record.model_copy(update={"rollback": later.record.rollback.model_copy(
        update={"restarts": MAX_RESTARTS})})
    assert tick(limit, pinned(62_000, 55_000), plan=ROLLBACK, at=40 + 180).actions == ()


def test_a_gone_new_version_owing_records_is_restarted() -> None:
    rec = rolling_back(Trigger.ABORT, epoch=3)
    assert tick(rec, pinned(62_000, 52_000), plan=ROLLBACK,
                new=GONE).actions == (RestartNew(),)
    # alive and healthy after an abort: waited for
    assert tick(rec, pinned(62_000, 52_000), plan=ROLLBACK).actions == ()


def test_the_new_version_is_stopped_once_it_passed_the_pin_then_the_old_takes_over() -> None:
    rec = rolling_back(Trigger.STALLED, epoch=3, restarts=1)
    s = tick(rec, pinned(59_000, 61_000, held=3), plan=ROLLBACK)
    assert s.actions == (StopNew(),)
    stopped = step(s.record, NewStopped(), NOW).record
    waiting = tick(stopped, pinned(59_000, 61_000, held=3), plan=ROLLBACK)
    assert waiting.record.phase is Phase.ROLLING_BACK
    assert "partition 0 holds 3 records" in waiting.record.note
    done = tick(stopped, pinned(61_500, 61_000), plan=ROLLBACK)
    assert done.record.phase is Phase.ROLLED_BACK and done.record.outcome is not None
    assert "blue is primary again (partition 0 from 1970-01-01T00:01:00.001Z)" \
        in done.record.outcome
    assert "consumers saw every record once" in done.record.outcome


def test_a_new_version_that_never_delivers_its_range_fails_the_rollback_and_says_what_is_missing(
) -> None:
    rec = rolling_back(Trigger.STALLED, epoch=3, restarts=MAX_RESTARTS)
    s = tick(rec, pinned(62_000, 52_000, held=40), plan=ROLLBACK, at=10 + 601)
    assert s.record.phase is Phase.FAILED and s.actions == (StopNew(),)
    assert s.record.outcome is not None
    assert ("consumers miss green's records of event times partition 0: "
            "[1970-01-01T00:00:52.000Z, 1970-01-01T00:01:00.001Z)") in s.record.outcome


def test_an_old_version_that_does_not_pass_the_rollback_boundary_fails_after_the_timeout() -> None:
    rec = rolling_back(Trigger.STALLED, epoch=3, new_stopped=True)
    assert tick(rec, pinned(59_000, 61_000), plan=ROLLBACK).record.phase is Phase.ROLLING_BACK
    s = tick(rec, pinned(59_000, 61_000), plan=ROLLBACK, at=10 + 601)
    assert s.record.phase is Phase.FAILED and s.record.outcome is not None
    assert "is blue running? Nothing was lost" in s.record.outcome


# -- properties ---------------------------------------------------------------------------------

EVENTS = st.sampled_from([
    Tick(observe(*CAUGHT_UP)), Tick(observe(*CAUGHT_UP, plan=SWITCH)),
    Tick(observe(*CAUGHT_UP, new=GONE)), Tick(observe(*CAUGHT_UP, at=2_000)),
    Tick(observe(pinned(62_000, 52_000), plan=ROLLBACK)),
    Tick(observe(pinned(62_000, 61_000), plan=ROLLBACK)),
    Tick(observe(part(55_000, 56_000, epoch=2, boundary=50_000), plan=SWITCH)),
    Tick(observe(*CAUGHT_UP, new=NewProcess(state=ProcState.UNKNOWN))),
    NewStarted(REF), StartFailed("x"), CompareDone(summary(10, 0)), CompareDone(summary(0, 10)),
    CompareFailed("x"), SwitchPublished(2, 50_000), SwitchRefused("x"), OldStopped(0),
    OldStopped(1), RollbackPublished(3), NewStopped(), NewRestarted(REF), AbortRequested("ops"),
])


@settings(max_examples=200, deadline=None)
@given(st.lists(EVENTS, max_size=30), st.booleans())
def test_any_sequence_of_events_keeps_the_rules(events: list[object], compare: bool) -> None:
    rec = record(spec=spec(compare=compare))
    stopped_old = False
    for event in events:
        before = rec
        s = step(rec, event, NOW)  # type: ignore[arg-type]
        rec = s.record
        if before.phase.terminal:
            assert s == Step(before)
        # the old version is stopped only at CLEAR_TO_TEARDOWN's phase, and never rolled back to
        if StopOld() in s.actions:
            assert rec.phase is Phase.TEARING_DOWN
            stopped_old = True
        if stopped_old:
            assert rec.phase is not Phase.ROLLING_BACK and not any(
                isinstance(a, PublishRollback) for a in s.actions)
        if any(isinstance(a, PublishSwitch) for a in s.actions):
            assert rec.phase is Phase.SWITCHING
            assert not compare or (rec.compare is not None and rec.compare.passed)
        # the phase history is one span per phase entered, contiguous, open only at the end
        spans = rec.phases
        assert spans[0].started_at == T0
        for a, b in itertools.pairwise(spans):
            assert a.ended_at == b.started_at
        assert (spans[-1].ended_at is not None) == rec.phase.terminal
        assert rec.phase.terminal == (rec.outcome is not None)
        if rec.phase is Phase.ROLLED_BACK:
            assert rec.rollback is not None and rec.rollback.new_stopped
