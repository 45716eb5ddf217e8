"""The rollout's phase machine: pure, no I/O, no clock of its own.

``step(record, event, now)`` takes the journal record and one event (a :class:`Tick` with what
the driver observed, or the result of an action the driver ran) and returns the next record
and the actions to run. The driver journals the record before it runs the actions, so every
step can be repeated after a crash: each action is asked for again only while its effect is not
observed (a new version process that is alive, a plan on the control topic, a comparison
running), and the few effects that cannot be observed (the stop commands) are documented as
having to be idempotent.

Phases: STARTING_NEW -> CATCHING_UP -> [COMPARING] -> SWITCHING -> DRAINING -> TEARING_DOWN ->
SOAKING -> DONE. With canary steps (``--canary 5%,25%,100%``) each step below 100% is
SWITCHING (a later plan segment with the wider share, pinned as always) -> DRAINING (until
HANDED_OVER: the step's keys are handed over) -> CANARY (watched for ``--canary-for``, with
``--compare`` restricted to the canary's keys) -> the next step; the last step (every key) is
the whole switch, and goes on as above. The deadline counts from the start to the first step's
handover, then again from each step's publication to its handover; a failed comparison, a
stall or the deadline rolls back (a later segment without the canary), as without steps.
With ``--pause-before switch`` the rollout waits, caught up (and compared), until an operator
promotes it (with canary steps: before each step); with ``--pause-before teardown`` it waits
at CLEAR_TO_TEARDOWN.
A paused rollout (``cutover rollout pause``) makes no step forward until it is resumed; what
keeps consumers safe (the deadline before the switch, STALLED, the new version's exit) still
rolls it back. Until the old version is stopped, the deadline, STALLED, the new version's exit,
a failed comparison or an abort lead to ROLLING_BACK -> ROLLED_BACK (or FAILED, with the reason,
when the rollback cannot finish).

Why a rollback may need the new version once more: the router decides a record for good when
it passes it, and after the switch the old version's records at or above the boundary are
decided as suppressed as soon as they arrive. A rollback plan therefore takes effect on each
partition only above its horizon (the router pins it there), and the range between the switch
boundary and that pin belongs to the new version. The rollback waits until the new version's
watermark has passed the pin on every partition, restarting it (from its checkpoint) when it is
stuck or gone, and only then stops it; when it cannot, the rollout ends FAILED and says which
event times consumers miss.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from cutover.plan import CutoverPlan
from cutover.rollout.events import (
    NO_WATERMARK,
    AbortRequested,
    Action,
    CompareDone,
    CompareFailed,
    Event,
    NewRestarted,
    NewStarted,
    NewStopped,
    Observation,
    OldStopped,
    ProcState,
    PublishRollback,
    PublishSwitch,
    Requested,
    RestartNew,
    RollbackPublished,
    RouteFacts,
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
    Gate,
    Phase,
    PhaseSpan,
    RequestKind,
    RollbackState,
    RolloutRecord,
    Trigger,
    percent,
)
from cutover.rollout.sentences import (
    at,
    dur,
    gap,
    old_not_passing,
    rollback_unapplied,
    rolled_back,
    soak_failed,
    stop_old_failed,
    succeeded,
)
from cutover.status import TransitionState

MAX_RESTARTS = 2                          # restarts of a stuck new version during a rollback


# -- the machine --------------------------------------------------------------------------------


def step(rec: RolloutRecord, event: Event, now: datetime) -> Step:
    """The next record and the actions to run, for one event."""
    if rec.phase.terminal:
        return Step(rec)
    if isinstance(event, Tick):
        return _tick(rec, event.obs)
    if isinstance(event, AbortRequested):
        if rec.phase.old_still_running:
            return _rollback(rec, now, Trigger.ABORT, f"aborted by {event.by}")
        return Step(rec)
    if isinstance(event, Requested):
        return _requested(rec, event)
    phase = rec.phase
    if isinstance(event, NewStarted) and phase is Phase.STARTING_NEW:
        return _enter(_with(rec, new_process=event.ref), Phase.CATCHING_UP, now,
                      f"{rec.spec.new} started (pid {event.ref.pid}, log {event.ref.log})")
    if isinstance(event, StartFailed) and phase is Phase.STARTING_NEW:
        return _rollback(rec, now, Trigger.START_FAILED,
                         f"the start command of {rec.spec.new} failed: {event.reason}")
    if isinstance(event, CompareDone) and phase is Phase.CANARY:
        done = _with(rec, compare=event.summary)
        if event.summary.passed:
            return Step(_with(done, note=f"{rec.spec.step_name(rec.step)}: "
                                         f"{event.summary.headline()}"))
        return _rollback(done, now, Trigger.COMPARE,
                         f"the comparison of the canary's keys failed at "
                         f"{rec.spec.step_name(rec.step)}: {event.summary.headline()}")
    if isinstance(event, CompareFailed) and phase is Phase.CANARY:
        return _rollback(rec, now, Trigger.COMPARE,
                         f"the comparison of the canary's keys could not run: {event.reason}")
    if isinstance(event, CompareDone) and phase is Phase.COMPARING:
        done = _with(rec, compare=event.summary)
        if event.summary.passed and rec.paused_by is not None:
            return Step(done)   # the switch waits for the resume (the tick goes on from here)
        if event.summary.passed:
            return _gate(done, Gate.SWITCH, event.summary.headline()) or _enter(
                done, Phase.SWITCHING, now, event.summary.headline(), _publish(done))
        return _rollback(done, now, Trigger.COMPARE,
                         f"the comparison failed: {event.summary.headline()}")
    if isinstance(event, CompareFailed) and phase is Phase.COMPARING:
        return _rollback(rec, now, Trigger.COMPARE,
                         f"the comparison could not run: {event.reason}")
    if isinstance(event, SwitchPublished) and phase is Phase.SWITCHING:
        what = (f"{rec.spec.new} is primary" if rec.spec.step_share(rec.step) == 1 else
                f"{rec.spec.step_name(rec.step)}: {rec.spec.new} is primary of "
                f"{percent(rec.spec.step_share(rec.step))} of the keys")
        return _enter(_with(rec, switch_epoch=event.epoch, switch_boundary=event.boundary),
                      Phase.DRAINING, now, f"{what} from event time {at(event.boundary)} "
                      f"(plan epoch {event.epoch})")
    if isinstance(event, SwitchRefused) and phase is Phase.SWITCHING:
        return Step(_with(rec, note=f"switch refused, retrying: {event.reason}"))
    if isinstance(event, OldStopped) and phase is Phase.TEARING_DOWN:
        if event.exit_code == 0:
            return _enter(rec, Phase.SOAKING, now, f"{rec.spec.old} stopped")
        return _finish(rec, Phase.FAILED, now, stop_old_failed(rec, event.exit_code))
    rb = rec.rollback
    if phase is Phase.ROLLING_BACK and rb is not None:
        if isinstance(event, RollbackPublished):
            return Step(_with(rec, rollback=_rb(rb, epoch=event.epoch),
                              note=f"rollback plan published (epoch {event.epoch})"))
        if isinstance(event, NewStopped):
            return Step(_with(rec, rollback=_rb(rb, new_stopped=True),
                              note=f"{rec.spec.new} stopped"))
        if isinstance(event, NewRestarted):
            return Step(_with(rec, new_process=event.ref,
                              rollback=_rb(rb, restarts=rb.restarts + 1, progress_at=now),
                              note=f"{rec.spec.new} restarted (pid {event.ref.pid}) to emit the "
                                   "records the router gave it"))
    return Step(rec)


def _tick(rec: RolloutRecord, obs: Observation) -> Step:
    spec, phase, now = rec.spec, rec.phase, obs.now
    if phase.old_still_running:
        foreign = _foreign_plan(rec, obs.route.plan)
        if foreign is not None:
            return _finish(rec, Phase.FAILED, now, foreign)
        # Waiting at the teardown gate, the transition is already clear, and a canary step
        # in force has its keys: no deadline to meet.
        if now >= rec.deadline_at and rec.waiting_at is not Gate.TEARDOWN \
                and phase is not Phase.CANARY and not (
                    phase is Phase.SWITCHING and rec.waiting_at is Gate.SWITCH and rec.step):
            return _rollback(rec, now, Trigger.DEADLINE,
                             f"the deadline ({dur(spec.deadline_ms)}) passed in {phase.value}"
                             f"{_waiting_on(rec, obs)}")
        if rec.new_process is not None and obs.new.state is ProcState.GONE:
            code = f" with code {obs.new.exit_code}" if obs.new.exit_code is not None else ""
            return _rollback(rec, now, Trigger.NEW_EXITED,
                             f"{spec.new}'s start command exited{code} in {phase.value}")
    if rec.paused_by is not None and phase is not Phase.ROLLING_BACK:
        return Step(rec)
    if phase is Phase.STARTING_NEW:
        if rec.new_process is None:
            return Step(rec, (StartNew(),))
        return _enter(rec, Phase.CATCHING_UP, now, f"{spec.new} is running")
    if phase is Phase.CATCHING_UP:
        lagging = catch_up_lag(obs.route, spec.old, spec.new, spec.catch_up_lag_ms)
        if lagging:
            return Step(_with(rec, note=lagging))
        done = (f"{spec.new} within {dur(spec.catch_up_lag_ms)} of {spec.old} on all "
                f"{obs.route.num_partitions} partitions")
        if spec.compare and not spec.canary:   # with steps, each step compares its keys
            return _enter(rec, Phase.COMPARING, now, done, StartCompare())
        return _gate(rec, Gate.SWITCH, done) or _enter(rec, Phase.SWITCHING, now, done,
                                                       _publish(rec))
    if phase is Phase.COMPARING:
        if rec.compare is None and not obs.compare_running:
            return Step(rec, (StartCompare(),))
        if rec.compare is not None and rec.compare.passed and _gate(rec, Gate.SWITCH, "") is None:
            return _enter(rec, Phase.SWITCHING, now, rec.compare.headline(),
                          _publish(rec))   # promoted past the gate
        return Step(rec)
    if phase is Phase.SWITCHING:
        if rec.waiting_at is Gate.SWITCH:   # a later canary step waits for its promotion
            if _gate(rec, Gate.SWITCH, "") is not None:
                return Step(rec)
            rec = _with(rec, waiting_at=None)
        plan = obs.route.plan
        if plan is not None and _is_switch(rec, plan):
            # published by a run that died before journaling it
            assert plan.transition is not None
            return step(rec, SwitchPublished(plan.epoch, plan.transition[2]), now)
        return Step(rec, (_publish(rec),))
    if phase is Phase.CANARY:
        return _canary_tick(rec, obs)
    if phase is Phase.DRAINING and spec.step_share(rec.step) < 1:
        tr = obs.route.transition
        if tr.state is TransitionState.HANDED_OVER and tr.to == spec.new \
                and tr.share == spec.step_share(rec.step):
            note = (f"{spec.step_name(rec.step)} handed over: watching it for "
                    f"{dur(spec.canary_for_ms)}")
            return _enter(_with(rec, compare=None), Phase.CANARY, now, note,
                          *((StartCompare(spec.step_share(rec.step)),) if spec.compare else ()))
        if tr.state is TransitionState.STALLED:
            return _rollback(rec, now, Trigger.STALLED,
                             f"{spec.step_name(rec.step)} stalled: {tr.describe_holdups()}")
        return Step(_with(rec, note=f"waiting for {spec.step_name(rec.step)} to be handed "
                                    f"over: {tr.describe_holdups(limit=3) or tr.state.value}"))
    if phase is Phase.DRAINING:
        tr = obs.route.transition
        if tr.state is TransitionState.CLEAR_TO_TEARDOWN and tr.to == spec.new:
            clear = f"CLEAR_TO_TEARDOWN: {spec.old} may be stopped"
            return _gate(rec, Gate.TEARDOWN, clear) or _enter(rec, Phase.TEARING_DOWN, now,
                                                              clear, StopOld())
        if tr.state is TransitionState.STALLED:
            return _rollback(rec, now, Trigger.STALLED,
                             f"the switch stalled: {tr.describe_holdups()}")
        return Step(_with(rec, note=f"waiting for CLEAR_TO_TEARDOWN: "
                                    f"{tr.describe_holdups(limit=3) or tr.state.value}"))
    if phase is Phase.TEARING_DOWN:
        return Step(rec, (StopOld(),))   # resumed: the stop command runs again
    if phase is Phase.SOAKING:
        if rec.new_process is not None and obs.new.state is ProcState.GONE:
            return _finish(rec, Phase.FAILED, now, soak_failed(rec, obs))
        if now >= rec.phase_started() + timedelta(milliseconds=spec.soak_ms):
            return _finish(rec, Phase.DONE, now, succeeded(rec, obs))
        return Step(rec)
    return _rollback_tick(rec, obs)


def _canary_tick(rec: RolloutRecord, obs: Observation) -> Step:
    """A canary step in force: watched for ``canary_for``, its keys compared (``--compare``);
    then the next step, past the switch gate when the spec asks for one."""
    spec, now = rec.spec, obs.now
    share = spec.step_share(rec.step)
    if spec.compare:
        if rec.compare is None:
            if not obs.compare_running:
                return Step(rec, (StartCompare(share),))
            return Step(rec)
        if not rec.compare.passed:   # journaled before its rollback: roll back now
            return _rollback(rec, now, Trigger.COMPARE, f"the comparison of the canary's keys "
                             f"failed: {rec.compare.headline()}")
    if now < rec.phase_started() + timedelta(milliseconds=spec.canary_for_ms):
        return Step(rec)
    nxt = rec.step + 1
    done = f"{spec.step_name(rec.step)} held for {dur(spec.canary_for_ms)}"
    advanced = _with(rec, step=nxt, promoted=tuple(g for g in rec.promoted
                                                  if g is not Gate.SWITCH),
                     deadline_at=now + timedelta(milliseconds=spec.deadline_ms))
    entered = _enter(advanced, Phase.SWITCHING, now, f"{done}; next {spec.step_name(nxt)}")
    gated = _gate(entered.record, Gate.SWITCH, entered.record.note)
    if gated is not None:
        return gated
    return Step(entered.record, (_publish(advanced),))


def _publish(rec: RolloutRecord) -> PublishSwitch:
    """The switch of the rollout's current step (the whole switch without canary steps)."""
    return PublishSwitch(rec.deadline_at, rec.spec.step_share(rec.step))


def _rollback_tick(rec: RolloutRecord, obs: Observation) -> Step:
    rb, spec, now = rec.rollback, rec.spec, obs.now
    assert rb is not None
    route = obs.route
    switched = rec.switch_epoch is not None
    timed_out = now >= rb.started_at + timedelta(milliseconds=spec.rollback_timeout_ms)
    if switched and rb.epoch is None:
        plan = route.plan
        assert rec.switch_epoch is not None
        if plan is not None and plan.epoch > rec.switch_epoch \
                and plan.segments[-1].primary == spec.old and plan.segments[-1].canary is None:
            rb = _rb(rb, epoch=plan.epoch)   # published by a run that died before journaling
            rec = _with(rec, rollback=rb)
        else:
            return Step(_with(rec, note="publishing the rollback plan"),
                        (PublishRollback(rec.base_plan.segments),))
    if switched:
        assert rb.epoch is not None
        behind = [p for p in range(route.num_partitions) if p not in route.partitions
                  or (route.partitions[p].epoch or 0) < rb.epoch]
        if behind:
            if timed_out:
                return _finish(rec, Phase.FAILED, now, rollback_unapplied(rec, behind))
            return Step(_with(rec, note=f"waiting for partitions {behind} to apply the "
                                        f"rollback plan (epoch {rb.epoch})"))
    owed = owed_ranges(route, spec.new) if switched else {}
    if owed and not rb.new_stopped:
        marks = {p: route.partitions[p].mark(spec.new) for p in owed}
        if rb.progress_at is None or any(m > rb.new_marks.get(p, NO_WATERMARK)
                                         for p, m in marks.items()):
            rb = _rb(rb, new_marks=marks, progress_at=now)
        owes = _describe_owed(owed, route, spec.new)
        rec = _with(rec, rollback=rb, note=f"waiting for {spec.new} to emit the records the "
                                           f"router gave it: {owes}")
        if timed_out:
            return _finish(rec, Phase.FAILED, now, gap(rec, owed, route), StopNew())
        assert rb.progress_at is not None
        stuck = (obs.new.state is ProcState.GONE
                 or (obs.new.state is ProcState.ALIVE
                     and ((rb.trigger.new_is_stuck and rb.restarts == 0)
                          or now - rb.progress_at >= timedelta(milliseconds=spec.stuck_after_ms))))
        if stuck and rb.restarts < MAX_RESTARTS:
            return Step(rec, (RestartNew(),))
        return Step(rec)
    if not rb.new_stopped:
        return Step(_with(rec, note=f"stopping {spec.new}"), (StopNew(),))
    unsteady = _unsteady(route, spec.old) if switched else []
    if not unsteady:
        return _finish(rec, Phase.ROLLED_BACK, now, rolled_back(rec, route))
    if timed_out:
        return _finish(rec, Phase.FAILED, now, old_not_passing(rec, unsteady))
    return Step(_with(rec, note=f"waiting for {spec.old} to pass the rollback boundary: "
                                f"{'; '.join(unsteady[:3])}"))


# -- gates, pause and resume ---------------------------------------------------------------------


def _gate(rec: RolloutRecord, gate: Gate, done: str) -> Step | None:
    """Wait at ``gate`` (None: go on) while the spec asks for it and no operator promoted it."""
    if gate not in rec.spec.pause_before or gate in rec.promoted:
        return None
    note = (f"{done + '; ' if done else ''}waiting before the {gate.value}: promote with "
            f"`cutover rollout promote --route {rec.route}`")
    return Step(_with(rec, waiting_at=gate, note=note))


def _requested(rec: RolloutRecord, req: Requested) -> Step:
    if req.kind is RequestKind.PAUSE:
        if rec.paused_by is not None:
            return Step(rec)
        return Step(_with(rec, paused_by=req.by, note=f"paused by {req.by} in "
                                                       f"{rec.phase.value}: resume with `cutover "
                                                       f"rollout resume --route {rec.route}`"))
    if req.kind is RequestKind.RESUME:
        if rec.paused_by is None:
            return Step(rec)
        return Step(_with(rec, paused_by=None, note=f"resumed by {req.by}"))
    gate = rec.waiting_at or next_gate(rec)
    if gate is None or gate in rec.promoted:
        return Step(rec)
    return Step(_with(rec, promoted=(*rec.promoted, gate), waiting_at=None,
                      note=f"promoted past the {gate.value} by {req.by}"))


def next_gate(rec: RolloutRecord) -> Gate | None:
    """The first gate of the spec not promoted yet and not behind the rollout already."""
    passed = {Gate.SWITCH: rec.switch_epoch is not None and not (
                  rec.phase in (Phase.CANARY, Phase.SWITCHING) and rec.spec.canary),
              Gate.TEARDOWN: rec.phase in (Phase.TEARING_DOWN, Phase.SOAKING)}
    for gate in rec.spec.pause_before:
        if gate not in rec.promoted and not passed[gate]:
            return gate
    return None


# -- facts of the route -------------------------------------------------------------------------


def catch_up_lag(route: RouteFacts, old: str, new: str, lag_ms: int) -> str | None:
    """Why ``new`` has not caught up with ``old`` (None when it has): on every partition both
    have a watermark and the new one trails the old one by at most ``lag_ms``."""
    if route.num_partitions == 0:
        return "no router status yet"
    for p in range(route.num_partitions):
        f = route.partitions.get(p)
        if f is None:
            return f"no router status for partition {p} yet"
        if old not in f.watermarks:
            return f"partition {p}: no watermark of {old} yet"
        if new not in f.watermarks:
            return f"partition {p}: no watermark of {new} yet"
        behind = f.watermarks[old] - f.watermarks[new]
        if behind > lag_ms:
            return (f"partition {p}: {new} {dur(behind)} behind {old} "
                    f"(allowed {dur(lag_ms)})")
    return None


def owed_ranges(route: RouteFacts, new: str) -> dict[int, int]:
    """Partitions where the rollback plan was pinned (the router had already given event times
    past the switch boundary to ``new``) and ``new``'s watermark has not passed the pin yet:
    partition -> the pinned boundary."""
    return {p: f.boundary for p, f in sorted(route.partitions.items())
            if f.pinned and f.boundary is not None and f.mark(new) < f.boundary}


def _unsteady(route: RouteFacts, old: str) -> list[str]:
    out = []
    for p, f in sorted(route.partitions.items()):
        if f.held:
            out.append(f"partition {p} holds {f.held} records")
        elif f.boundary is not None and f.mark(old) < f.boundary:
            seen = f.watermarks.get(old)
            out.append(f"partition {p}: {old} at {seen if seen is not None else 'no watermark'}"
                       f", needs {f.boundary}")
    return out


def _is_switch(rec: RolloutRecord, plan: CutoverPlan) -> bool:
    """``plan`` is the switch of the rollout's current step (a canary of the step's share, or
    every key to the new version)."""
    after = rec.switch_epoch if rec.switch_epoch is not None else rec.base_plan.epoch
    if plan.epoch <= after or plan.transition is None or plan.transition[1] != rec.spec.new:
        return False
    last, share = plan.segments[-1], rec.spec.step_share(rec.step)
    if share == 1:
        return last.canary is None
    return last.canary is not None and last.canary.share == share


def _foreign_plan(rec: RolloutRecord, plan: CutoverPlan | None) -> str | None:
    """A sentence when someone else changed the route's plan under the rollout."""
    if rec.phase is Phase.SWITCHING and plan is not None and _is_switch(rec, plan):
        return None
    # before the first switch the rollout's plan is the base; from it on, its last switch's
    expected = rec.switch_epoch if rec.switch_epoch is not None else rec.base_plan.epoch
    if plan is None or expected is None or plan.epoch <= expected:
        # An older epoch (or none) is a read from before the rollout's own plan: epochs only
        # grow (routers reject a lower one), so nobody can have replaced it with that.
        return None
    got = f"epoch {plan.epoch} by {plan.issued_by or 'unknown'}"
    return (f"the route's plan changed under the rollout (expected epoch {expected}, found "
            f"{got}); the rollout stops here and leaves both versions running: check the plan "
            f"with `cutover plan show --route {rec.route}`")


def _waiting_on(rec: RolloutRecord, obs: Observation) -> str:
    if rec.phase is Phase.DRAINING:
        holdups = obs.route.transition.describe_holdups(limit=3)
        return f" ({holdups})" if holdups else ""
    if rec.phase is Phase.CATCHING_UP:
        lag = catch_up_lag(obs.route, rec.spec.old, rec.spec.new, rec.spec.catch_up_lag_ms)
        return f" ({lag})" if lag else ""
    return ""


def _describe_owed(owed: Mapping[int, int], route: RouteFacts, new: str) -> str:
    parts = []
    for p, b in list(owed.items())[:3]:
        wm = route.partitions[p].watermarks.get(new)
        parts.append(f"partition {p}: watermark {at(wm)}, needs {at(b)}")
    return "; ".join(parts) + (f"; and {len(owed) - 3} more" if len(owed) > 3 else "")


# -- record helpers -----------------------------------------------------------------------------


def _with(rec: RolloutRecord, **changes: Any) -> RolloutRecord:
    return rec.model_copy(update=changes)


def _rb(rb: RollbackState, **changes: Any) -> RollbackState:
    return rb.model_copy(update=changes)


def _enter(rec: RolloutRecord, phase: Phase, now: datetime, note: str,
           *actions: Action) -> Step:
    rec = _with(rec, waiting_at=None)
    spans = list(rec.phases)
    if spans and spans[-1].ended_at is None:
        spans[-1] = spans[-1].model_copy(update={"ended_at": now})
    if not phase.terminal:
        spans.append(PhaseSpan(phase=phase, started_at=now))
    return Step(_with(rec, phase=phase, phases=tuple(spans), note=note), actions)


def _finish(rec: RolloutRecord, phase: Phase, now: datetime, outcome: str,
            *actions: Action) -> Step:
    done = _enter(rec, phase, now, outcome, *actions)
    return Step(_with(done.record, outcome=outcome), done.actions)


def _rollback(rec: RolloutRecord, now: datetime, trigger: Trigger, reason: str) -> Step:
    rb = RollbackState(trigger=trigger, reason=reason, started_at=now)
    return _enter(_with(rec, rollback=rb), Phase.ROLLING_BACK, now, reason)
