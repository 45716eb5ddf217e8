"""A rollout by key share (``cutover rollout --canary 5%,25%,100% --canary-for 10m``): the
machine steps through the shares, each step a later plan segment with a wider share, watches
each for ``canary_for`` with the comparison restricted to the canary's keys, waits at the
promote gate and while paused between steps, and rolls back on a failed comparison, a stall or
the deadline. Beside the machine's other properties: shares only grow, a rollback is possible
from every step, and every step's plan validates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rollout_support import BASE, T0, observe, part, record, spec
from test_rollout_machine import CAUGHT_UP, summary

from cutover.control.next_plan import At, next_canary_plan, next_plan
from cutover.control.routes import PartitionReport, RouteView
from cutover.key_primary import Canary
from cutover.plan import CutoverPlan
from cutover.rollout.events import (
    AbortRequested,
    CompareDone,
    PublishRollback,
    PublishSwitch,
    Requested,
    StartCompare,
    Step,
    StopOld,
    SwitchPublished,
    Tick,
)
from cutover.rollout.journal import Gate, Phase, RequestKind, RolloutRecord, Trigger
from cutover.rollout.machine import step
from cutover.status import PartitionStatus

STEPS = (0.05, 0.25, 1.0)
WATCH_MS = 600_000


def canary_spec(**over: object) -> object:
    return spec(**{"canary": STEPS, "canary_for_ms": WATCH_MS, **over})


def plan(epoch: int, *shares: float) -> CutoverPlan:
    """blue, then a segment per share from 50,000 on, 10,000 apart (1: green for every key)."""
    segments: list[dict[str, object]] = [{"from_event_time": None, "primary": "blue"}]
    for i, share in enumerate(shares):
        t = 50_000 + 10_000 * i
        segments.append({"from_event_time": t, "primary": "green"} if share == 1 else
                        {"from_event_time": t, "primary": "blue",
                         "canary": {"version": "green", "share": share}})
    return CutoverPlan(route="r", epoch=epoch, segments=segments)


def handed_over(p: CutoverPlan, at: float) -> Tick:
    """Both versions past the plan's last boundary on both partitions."""
    b = p.boundaries[-1]
    parts = [part(b + 5_000, b + 5_000, epoch=p.epoch, boundary=b) for _ in range(2)]
    return Tick(observe(*parts, plan=p, at=at))


def run(rec: RolloutRecord, event: object, at: float) -> Step:
    return step(rec, event, T0 + timedelta(seconds=at))  # type: ignore[arg-type]


def at_step(i: int, **over: object) -> RolloutRecord:
    """In CANARY at step ``i``, its plan (epoch 2 + i) handed over at 100 s."""
    s = over.pop("spec", None) or canary_spec()
    return record(Phase.SWITCHING, spec=s, step=i, switch_epoch=2 + i,
                  switch_boundary=50_000 + 10_000 * i, **over)


def into_canary(i: int, **over: object) -> RolloutRecord:
    rec = at_step(i, **over)
    rec = run(rec, SwitchPublished(2 + i, 50_000 + 10_000 * i), 90).record
    assert rec.phase is Phase.DRAINING
    s = run(rec, handed_over(plan(2 + i, *STEPS[:i + 1]), 100), 100)
    assert s.record.phase is Phase.CANARY
    return s.record


# -- the steps ----------------------------------------------------------------------------------


def test_caught_up_the_first_step_publishes_the_first_share_not_every_key() -> None:
    rec = record(Phase.CATCHING_UP, spec=canary_spec(compare=True))
    s = step(rec, Tick(observe(*CAUGHT_UP)), T0 + timedelta(seconds=10))
    assert s.record.phase is Phase.SWITCHING   # no whole-route comparison before a canary
    assert next(a for a in s.actions if isinstance(a, PublishSwitch)).share == 0.05


def test_a_step_handed_over_is_watched_with_its_keys_compared() -> None:
    rec = run(at_step(0, spec=canary_spec(compare=True)), SwitchPublished(2, 50_000),
              90).record
    assert rec.note == "step 1/3 (5% of the keys): green is primary of 5% of the keys from " \
                       "event time 1970-01-01T00:00:50.000Z (plan epoch 2)"
    pending = run(rec, Tick(observe(part(60_000, 40_000, epoch=2, boundary=50_000),
                                    plan=plan(2, 0.05), at=95)), 95)
    assert pending.record.phase is Phase.DRAINING and "to be handed over" in pending.record.note
    s = run(rec, handed_over(plan(2, 0.05), 100), 100)
    assert s.record.phase is Phase.CANARY
    assert s.actions == (StartCompare(0.05),)


def test_a_step_goes_to_the_next_share_only_after_canary_for_and_a_passed_comparison() -> None:
    rec = into_canary(0, spec=canary_spec(compare=True))
    later = 100 + WATCH_MS / 1000
    assert run(rec, handed_over(plan(2, 0.05), later), later).record.phase is Phase.CANARY
    rec = run(rec, CompareDone(summary(100, 0)), 120).record
    assert rec.phase is Phase.CANARY and "5% of the keys" in rec.note
    early = run(rec, handed_over(plan(2, 0.05), later - 1), later - 1)
    assert early.record.phase is Phase.CANARY and not early.actions
    s = run(rec, handed_over(plan(2, 0.05), later), later)
    assert s.record.phase is Phase.SWITCHING and s.record.step == 1
    assert s.actions == (PublishSwitch(s.record.deadline_at, 0.25),)
    assert s.record.deadline_at == T0 + timedelta(seconds=later, milliseconds=900_000)


def test_the_last_step_is_the_whole_switch_and_ends_in_teardown() -> None:
    rec = at_step(2)
    rec = run(rec, SwitchPublished(4, 70_000), 90).record
    # a step below every key is HANDED_OVER; the last one is CLEAR_TO_TEARDOWN
    s = run(rec, handed_over(plan(4, 0.05, 0.25, 1.0), 100), 100)
    assert s.record.phase is Phase.TEARING_DOWN and s.actions == (StopOld(),)


def test_a_failed_comparison_of_the_canary_s_keys_rolls_back_to_a_segment_without_it() -> None:
    rec = into_canary(1, spec=canary_spec(compare=True))
    s = run(rec, CompareDone(summary(10, 90)), 130)
    assert s.record.phase is Phase.ROLLING_BACK
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.COMPARE
    assert "step 2/3 (25% of the keys)" in s.record.rollback.reason
    s = run(s.record, handed_over(plan(3, 0.05, 0.25), 131), 131)
    rollback = next(a for a in s.actions if isinstance(a, PublishRollback))
    assert rollback.segments == BASE.segments   # blue for every key, above the horizon


def test_a_stalled_step_rolls_back() -> None:
    rec = run(at_step(1), SwitchPublished(3, 60_000), 90).record
    late = plan(3, 0.05, 0.25).model_copy(update={"deadline": T0})
    s = run(rec, Tick(observe(part(70_000, 10_000, epoch=3, boundary=60_000), plan=late,
                              at=95)), 95)
    assert s.record.phase is Phase.ROLLING_BACK
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.STALLED


def test_the_deadline_holds_until_a_step_is_handed_over_not_while_it_is_watched() -> None:
    rec = run(at_step(0), SwitchPublished(2, 50_000), 90).record
    past = 900 + 1
    s = run(rec, Tick(observe(part(60_000, 40_000, epoch=2, boundary=50_000),
                              plan=plan(2, 0.05), at=past)), past)
    assert s.record.rollback is not None and s.record.rollback.trigger is Trigger.DEADLINE
    watched = into_canary(0, spec=canary_spec(canary_for_ms=2_000_000))
    assert run(watched, handed_over(plan(2, 0.05), past), past).record.phase is Phase.CANARY


def test_a_paused_rollout_does_not_take_the_next_step_until_resumed() -> None:
    rec = into_canary(0)
    rec = run(rec, Requested(RequestKind.PAUSE, "ops"), 110).record
    later = 100 + WATCH_MS / 1000 + 5
    assert run(rec, handed_over(plan(2, 0.05), later), later).record.phase is Phase.CANARY
    rec = run(rec, Requested(RequestKind.RESUME, "ops"), later).record
    assert run(rec, handed_over(plan(2, 0.05), later), later).record.phase is Phase.SWITCHING


def test_the_promote_gate_waits_before_each_step() -> None:
    rec = into_canary(0, spec=canary_spec(pause_before=(Gate.SWITCH,)), promoted=(Gate.SWITCH,))
    later = 100 + WATCH_MS / 1000
    s = run(rec, handed_over(plan(2, 0.05), later), later)
    assert s.record.phase is Phase.SWITCHING and s.record.waiting_at is Gate.SWITCH
    assert not s.actions and "cutover rollout promote --route r" in s.record.note
    waiting = run(s.record, handed_over(plan(2, 0.05), later + 60), later + 60)
    assert not waiting.actions
    promoted = run(s.record, Requested(RequestKind.PROMOTE, "ops"), later + 61).record
    s = run(promoted, handed_over(plan(2, 0.05), later + 62), later + 62)
    assert [a.share for a in s.actions if isinstance(a, PublishSwitch)] == [0.25]


def test_a_resumed_step_adopts_its_own_published_plan_but_not_the_previous_step_s() -> None:
    rec = at_step(1)   # journaled before step 2's plan was, maybe, published
    again = run(rec, handed_over(plan(2, 0.05), 95), 95)
    assert [a.share for a in again.actions if isinstance(a, PublishSwitch)] == [0.25]
    rec = rec.model_copy(update={"switch_epoch": 2})
    adopted = run(rec, handed_over(plan(3, 0.05, 0.25), 95), 95)
    assert adopted.record.phase is Phase.DRAINING and adopted.record.switch_epoch == 3


@pytest.mark.parametrize(("steps", "says"), [
    ((0.25, 0.05, 1.0), "do not grow"), ((0.05, 0.25), "end them with 100%"),
    ((0.00001, 1.0), "basis points"),
])
def test_steps_that_do_not_grow_to_every_key_are_refused(steps: tuple[float, ...],
                                                          says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        spec(canary=steps)


# -- properties ---------------------------------------------------------------------------------

SHARES = st.lists(st.integers(1, 9_999), min_size=1, max_size=5, unique=True).map(
    lambda bs: (*(b / 10_000 for b in sorted(bs)), 1.0))


def _view(p: CutoverPlan, horizon: int) -> RouteView:
    v = RouteView("r", plan=p, num_partitions=2)
    for i in range(2):
        v.partitions[i] = PartitionReport(PartitionStatus(
            horizon=horizon, watermarks={"blue": horizon, "green": horizon}), p.epoch, "w", T0)
    return v


@settings(max_examples=100, deadline=None)
@given(steps=SHARES)
def test_every_step_s_plan_validates_shares_only_grow_and_each_can_be_rolled_back(
        steps: tuple[float, ...]) -> None:
    """The plans a rollout publishes, step by step on a route whose horizon moves on: each
    validates, gives the new version a share no smaller than the last, and from each a
    rollback (a later segment without the canary, to the old version) validates too."""
    spec(canary=steps)   # a spec takes them
    current, horizon, given_keys = BASE, 1_000, 0.0
    for share in steps:
        view = _view(current, horizon)
        if share < 1:
            nxt = next_canary_plan(view, Canary(version="green", share=share), At("auto"),
                                   10_000, 60_000, False, T0).plan
            last = nxt.segments[-1]
            assert last.primary == "blue" and last.canary is not None
            assert last.canary.share >= given_keys
            given_keys = last.canary.share
        else:
            nxt = next_plan(view, "green", At("auto"), 10_000, 60_000, False, T0).plan
            assert nxt.segments[-1].canary is None and nxt.segments[-1].primary == "green"
        assert nxt.epoch == current.epoch + 1 and nxt.boundaries[-1] > horizon
        CutoverPlan.model_validate(nxt.model_dump())
        if share < 1:
            back = next_plan(_view(nxt, horizon + 20_000), "blue", At("auto"), 10_000, 60_000,
                             False, T0).plan
            assert back.segments[-1].canary is None and back.segments[-1].primary == "blue"
            assert back.transition == ("green", "blue", back.boundaries[-1])
        current, horizon = nxt, horizon + 20_000


@settings(max_examples=200, deadline=None)
@given(events=st.lists(st.sampled_from(["tick", "handed", "late", "pass", "fail", "published",
                                        "pause", "resume", "promote"]), max_size=40),
       gate=st.booleans(), compare=st.booleans())
def test_any_sequence_keeps_shares_growing_and_a_rollback_possible(
        events: list[str], gate: bool, compare: bool) -> None:
    s = canary_spec(compare=compare, pause_before=(Gate.SWITCH,) if gate else ())
    rec = record(Phase.CATCHING_UP, spec=s)
    at, epoch, published = 10.0, 1, [0.0]
    for name in events:
        at += 400
        if name == "published" and rec.phase is Phase.SWITCHING:
            epoch += 1
            event: object = SwitchPublished(epoch, 50_000 + 10_000 * rec.step)
        elif name == "handed" and rec.switch_epoch is not None:
            event = handed_over(plan(rec.switch_epoch, *STEPS[:rec.step + 1]), at)
        elif name in ("pass", "fail"):
            event = CompareDone(summary(100, 0 if name == "pass" else 100))
        elif name in ("pause", "resume", "promote"):
            event = Requested(RequestKind(name), "ops")
        else:
            event = Tick(observe(*CAUGHT_UP, at=at if name == "late" else 10))
        before = rec
        out = run(rec, event, at)
        rec = out.record
        for a in out.actions:
            if isinstance(a, PublishSwitch):   # shares only grow, step by step
                assert a.share >= published[-1] and a.share == STEPS[rec.step]
                published.append(a.share)
        assert rec.step >= before.step
        if rec.phase.old_still_running:   # from every step, an abort rolls back
            aborted = run(rec, AbortRequested("ops"), at).record
            assert aborted.phase is Phase.ROLLING_BACK


def test_a_rollout_without_steps_is_journaled_as_before_steps_existed() -> None:
    plain = record(Phase.DRAINING).to_json()
    assert b'"canary' not in plain and b'"step"' not in plain
    stepped = at_step(1).to_json()
    assert b'"canary":[0.05,0.25,1.0]' in stepped and b'"step":1' in stepped
    back = RolloutRecord.model_validate_json(stepped)
    assert (back.step, back.spec) == (1, at_step(1).spec)
