"""``cutover rollout``: the whole blue/green deploy of one route as one command.

It starts the new version with the operator's command, waits for it to catch up, optionally
compares both versions' outputs, switches (``--at auto``), waits for CLEAR_TO_TEARDOWN, stops
the old version with the operator's command, soaks, and is done; or rolls back. The phases and
their rules are :mod:`cutover.rollout.machine`; the loop is :mod:`cutover.cli.rollout_driver`.

``--resume`` continues a rollout whose command died, from its journal; ``--abort`` rolls it
back (asking the run that drives it, when one is alive). ``--pause-before switch|teardown``
makes it wait for ``cutover rollout promote``; ``cutover rollout status|promote|pause|resume``
(:mod:`cutover.cli.rollout_ops`) work from any host; ``--events`` and ``--notify`` send each
change as JSON (:mod:`cutover.rollout.notify`). A second rollout of a route that has
one in progress is refused. Exit codes: 0 done, 1 rolled back, 4 failed (the sentence says what
the operator must do), 2 refused, 3 broker unreachable, 5 another run took over, 130
interrupted (the rollout stays where it was, resumable).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from cutover.cli.cluster import broker_errors, cluster_args, connect
from cutover.cli.errors import CliError
from cutover.cli.rollout_driver import Driver, Superseded
from cutover.cli.rollout_ops import register_actions
from cutover.cli.rollout_procs import host, pid_alive
from cutover.cli.rollout_view import make_view
from cutover.cli.settings_file import route_in, settings_file
from cutover.cli.shares import parse_steps
from cutover.cli.times import parse_duration_ms
from cutover.control.rollout_claim import ClaimLost, JournalNotWritten, claim, publish_record
from cutover.control.routes import RouteView, StateReader, Target
from cutover.plan import utcnow
from cutover.rollout.events import AbortRequested, Event
from cutover.rollout.journal import (
    LEASE,
    Gate,
    Owner,
    Phase,
    PhaseSpan,
    RolloutRecord,
    RolloutSpec,
    owner_alive,
    percent,
)
from cutover.rollout.notify import EventSink
from cutover.settings import RouterSettings
from cutover.status import TransitionState

EXIT = {Phase.DONE: 0, Phase.ROLLED_BACK: 1, Phase.FAILED: 4}
SUPERSEDED = 5


def parse_fraction(text: str) -> float:
    """``0.1%`` or ``0.001``: a fraction between 0 and 1."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise CliError(f"--max-diff {text!r} is not a share of records; write e.g. 0.1% or "
                       "0.001 (between 0 and 100%)")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser("rollout", help="the whole blue/green deploy of a route, with rollback",
                       description="Deploy a new version of a route's job: start it, wait for "
                                   "it to catch up, compare (--compare), switch, drain, stop the "
                                   "old version, soak; or roll back. The runbook: "
                                   "docs/operations.md.")
    cluster_args(p)
    p.add_argument("--route", help="the route to deploy (required)")
    p.add_argument("--to", help="the new version (its bg.version)")
    p.add_argument("--start", help="shell command that runs the new version (it must keep "
                                   "running; rerun after a crash, it resumes from its "
                                   "checkpoint)")
    p.add_argument("--stop-old", help="shell command that stops the old version (idempotent)")
    p.add_argument("--stop-new", help="shell command that stops the new version; default: "
                                      "end the start command's process group")
    p.add_argument("--catch-up-lag", default="30s", help="how far the new version's watermark "
                                                         "may trail the old one's, everywhere")
    p.add_argument("--compare", action="store_true",
                   help="compare both versions' outputs before switching")
    p.add_argument("--compare-for", default="2m", help="how long to watch for the comparison")
    p.add_argument("--canary", metavar="SHARES",
                   help="roll out by key share, e.g. 5%%,25%%,100%%: each step gives the new "
                        "version a larger share of the keys (the last: every key); with "
                        "--compare each step compares the canary's keys")
    p.add_argument("--canary-for", default="10m", help="how long each canary step is watched "
                                                       "before the next")
    p.add_argument("--max-diff", default="0.1%",
                   help="share of compared records allowed to differ")
    p.add_argument("--deadline", default="15m", help="from the start to CLEAR_TO_TEARDOWN; "
                                                     "past it the rollout rolls back")
    p.add_argument("--soak", default="5m", help="how long the new version runs alone before "
                                                "the rollout is done")
    p.add_argument("--margin", default="10s", help="switch boundary ahead of every horizon")
    p.add_argument("--rollback-timeout", default="10m", help="how long a rollback may take")
    p.add_argument("--stuck-after", default="3m", help="during a rollback, restart the new "
                   "version when its watermark has not moved for this long (its start included: "
                   "leave room for the job to be scheduled and replay its checkpoint)")
    p.add_argument("--log-dir", help="where the commands' output goes (default "
                                     "var/rollout/<route>)")
    p.add_argument("--metrics-port", type=int, help="serve the rollout's Prometheus metrics "
                                                    "on this port while it runs")
    p.add_argument("--pause-before", action="append", choices=[g.value for g in Gate],
                   default=[], help="wait at this point for `cutover rollout promote`: switch "
                                    "(caught up, and compared) or teardown (CLEAR_TO_TEARDOWN, "
                                    "before the old version is stopped); may be repeated")
    p.add_argument("--events", metavar="FILE|-",
                   help="append one JSON line per phase change, gate, promote, pause and resume "
                        "to FILE (- for stdout; the progress then goes to stderr)")
    p.add_argument("--notify", metavar="URL",
                   help="POST the same JSON to URL (a webhook), retried, never holding the "
                        "rollout back")
    p.add_argument("--resume", action="store_true", help="continue the route's rollout from "
                                                         "its journal")
    p.add_argument("--abort", action="store_true", help="roll the route's rollout back")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_rollout)
    register_actions(p)


def _cmd_rollout(args: argparse.Namespace) -> int:
    if not args.route:
        raise CliError("name the route: --route NAME")
    if args.resume and args.abort:
        raise CliError("--resume and --abort exclude each other; pick one")
    given = [f"--{n.replace('_', '-')}" for n in ("to", "start", "stop_old", "stop_new",
                                                   "pause_before", "events", "notify")
             if getattr(args, n)]
    if (args.resume or args.abort) and given:
        raise CliError(f"{'--resume' if args.resume else '--abort'} continues the journaled "
                       f"rollout as it was started; drop {', '.join(given)}")
    missing = [f"--{n.replace('_', '-')}" for n in ("to", "start", "stop_old")
               if not getattr(args, n)]
    if not (args.resume or args.abort) and missing:
        raise CliError(f"a rollout needs {', '.join(missing)}; e.g. --to green --start "
                       "'cutover tag --version green -- job.py' --stop-old 'kill <blue pid>'")
    if (args.resume or args.abort) and args.canary:
        raise CliError(f"{'--resume' if args.resume else '--abort'} continues the journaled "
                       "rollout as it was started; drop --canary")
    if args.canary is not None:
        parse_steps(args.canary)
    for flag in ("catch_up_lag", "compare_for", "deadline", "soak", "margin",
                 "rollback_timeout", "stuck_after", "canary_for"):
        parse_duration_ms(getattr(args, flag))
    parse_fraction(args.max_diff)
    settings = _settings(args)
    t = connect(args)
    me = Owner(token=uuid.uuid4().hex, host=host(), pid=os.getpid())
    with broker_errors(), StateReader(t, args.route, status_tail=None,
                                      control_tail=None) as reader:
        view = reader.refresh()[args.route]
        if args.resume or args.abort:
            rec, first = _take_over(args, t, view, me)
            if rec is None:
                return _follow_abort(args, reader)
            if rec.spec.compare and rec.compare is None and settings is None:
                raise CliError("this rollout compares the versions' outputs, which needs the "
                               "route's settings: add --config (the router's settings file)")
        else:
            rec, first = _new(args, view, me), None
        try:
            claim(t, reader, rec)
        except ClaimLost as exc:
            raise CliError(str(exc)) from None
        except JournalNotWritten as exc:
            raise CliError(str(exc), 3) from None
        return _drive(args, t, settings, reader, me, rec, first)


def _settings(args: argparse.Namespace) -> RouterSettings | None:
    if not args.config:
        if args.compare:
            raise CliError("--compare reads the route's raw topics: pass --config (the "
                           "router's settings file)")
        return None
    s = settings_file(args.config)
    route_in(s, args.route, args.config)
    return s


def _new(args: argparse.Namespace, view: RouteView, me: Owner) -> RolloutRecord:
    _refuse_running(view)
    plan = view.plan
    if plan is None:
        raise CliError(f"route {args.route} has no plan yet; publish its first with `cutover "
                       f"plan init --route {args.route} --primary <running version>`")
    old = plan.segments[-1].primary
    canary = plan.segments[-1].canary
    if canary is not None:
        raise CliError(f"route {args.route} has a canary of {canary.version!r} at "
                       f"{canary.share:.2%} of the keys in force (epoch {plan.epoch}); end it "
                       f"first with `cutover switch --route {args.route} --to "
                       f"{canary.version}` (every key) or `--to {old}` (the rollback)")
    if old == args.to:
        raise CliError(f"{args.to!r} is already the primary of route {args.route} (epoch "
                       f"{plan.epoch}); nothing to roll out")
    tr = view.transition()
    if tr.state in (TransitionState.PENDING, TransitionState.STALLED):
        raise CliError(f"route {args.route} is in the middle of a transition ({tr.from_} -> "
                       f"{tr.to}, {tr.state.value}); let it finish (`cutover wait`) or roll it "
                       "back first")
    now = utcnow()
    deadline = parse_duration_ms(args.deadline)
    try:
        spec = RolloutSpec(
            route=args.route, old=old, new=args.to, start=args.start, stop_old=args.stop_old,
            stop_new=args.stop_new, catch_up_lag_ms=parse_duration_ms(args.catch_up_lag),
            compare=args.compare, compare_for_ms=parse_duration_ms(args.compare_for),
            max_diff=parse_fraction(args.max_diff), deadline_ms=deadline,
            soak_ms=parse_duration_ms(args.soak), margin_ms=parse_duration_ms(args.margin),
            rollback_timeout_ms=parse_duration_ms(args.rollback_timeout),
            stuck_after_ms=parse_duration_ms(args.stuck_after),
            log_dir=args.log_dir or f"var/rollout/{args.route}",
            pause_before=tuple(dict.fromkeys(Gate(g) for g in args.pause_before)),
            events=args.events, notify=args.notify,
            canary=parse_steps(args.canary) if args.canary is not None else (),
            canary_for_ms=parse_duration_ms(args.canary_for))
    except ValueError as exc:
        raise CliError(f"cannot roll out: {exc}") from None
    last = view.rollout
    return RolloutRecord(route=args.route, run_id=uuid.uuid4().hex,
                         claim=(last.claim + 1) if last else 1, owner=me, spec=spec,
                         phase=Phase.STARTING_NEW,
                         phases=(PhaseSpan(phase=Phase.STARTING_NEW, started_at=now),),
                         note=f"starting {args.to}", started_at=now,
                         deadline_at=now + timedelta(milliseconds=deadline), base_plan=plan)


def _refuse_running(view: RouteView) -> None:
    last = view.rollout
    if last is None or last.phase.terminal:
        return
    heard = int((utcnow() - last.updated_at).total_seconds())
    by = (f"pid {last.owner.pid} on {last.owner.host}, last heard {heard}s ago"
          if last.owner else "no run drives it now")
    raise CliError(f"route {view.route} has a rollout to {last.spec.new} in phase "
                   f"{last.phase.value} ({by}); continue it with `cutover rollout --resume "
                   f"--route {view.route}` or roll it back with `cutover rollout --abort "
                   f"--route {view.route}`")


def _take_over(args: argparse.Namespace, t: Target, view: RouteView,
               me: Owner) -> tuple[RolloutRecord | None, Event | None]:
    """The record this run claims for ``--resume``/``--abort``, and the event to start with;
    (None, None) when a live run was asked to abort instead."""
    last = view.rollout
    if last is None or last.phase.terminal:
        ended = f" (the last one ended {last.phase.value})" if last else ""
        raise CliError(f"route {args.route} has no rollout in progress{ended}; start one with "
                       "`cutover rollout --to <version> ...`")
    if args.abort and not (last.phase.old_still_running or last.phase is Phase.ROLLING_BACK):
        raise CliError(f"the rollout of route {args.route} is in {last.phase.value}: "
                       f"{last.spec.old} is stopped, there is nothing to roll back to; let it "
                       f"finish, then roll out {last.spec.old} again if needed")
    now = utcnow()
    local = last.owner is not None and last.owner.host == me.host
    alive = owner_alive(last, now, me.host,
                        _rollout_runs(last.owner.pid) if local and last.owner else None)
    by = f"{os.environ.get('USER', 'an operator')} (pid {me.pid} on {me.host})"
    if alive:
        if args.resume:
            assert last.owner is not None
            raise CliError(f"the rollout of route {args.route} is still driven by pid "
                           f"{last.owner.pid} on {last.owner.host}; stop that run first (Ctrl-C"
                           " leaves the rollout resumable), or roll it back with --abort")
        publish_record(t, last.model_copy(update={"abort_requested": by, "updated_at": now}))
        return None, None
    rec = last.model_copy(update={"claim": last.claim + 1, "owner": me,
                                  "note": f"taken over by {by}"})
    first: Event | None = None
    if args.abort:
        first = AbortRequested(by)
    elif last.abort_requested:
        first = AbortRequested(last.abort_requested)
    return rec, first


def _rollout_runs(pid: int) -> bool:
    """Whether ``pid`` is a live ``cutover rollout`` (not a process that reused the pid)."""
    if not pid_alive(pid):
        return False
    try:
        return b"rollout" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def _follow_abort(args: argparse.Namespace, reader: StateReader) -> int:
    """Wait while the live run rolls its rollout back; its outcome is ours."""
    print(f"asked the running rollout of route {args.route} to roll back; following its "
          "journal", flush=True)
    view = make_view()
    before: RolloutRecord | None = None
    try:
        while True:
            for rec in reader.refresh()[args.route].rollout_log:
                if before is not None and rec.phase != before.phase:
                    view.changed(before, rec, rec.updated_at)
                before = rec
                if rec.phase.terminal:
                    return _report(rec)
            if before is not None and utcnow() - before.updated_at > 2 * LEASE:
                raise CliError(f"the run driving the rollout of route {args.route} stopped "
                               "answering before it rolled back; run `cutover rollout --abort "
                               f"--route {args.route}` again to roll it back from here", 4)
            time.sleep(1.0)
    finally:
        view.close()


def _drive(args: argparse.Namespace, t: Target, settings: RouterSettings | None,
           reader: StateReader, me: Owner, rec: RolloutRecord, first: Event | None) -> int:
    view = make_view(sys.stderr if rec.spec.events == "-" else None)
    try:
        sink = (EventSink(rec.spec.events, rec.spec.notify, say=view.say)
                if rec.spec.events or rec.spec.notify else None)
        driver = Driver(t, settings, reader, me, view, interval=args.interval,
                        metrics_port=args.metrics_port, sink=sink)
    except OSError as exc:
        view.close()
        raise CliError(f"cannot serve metrics on port {args.metrics_port} ({exc.strerror}); "
                       "pick another --metrics-port") from None
    previous = signal.signal(signal.SIGTERM, _interrupt)
    stamp = utcnow().astimezone().strftime("%H:%M:%S")
    s = rec.spec
    steps = (f" by key share ({', '.join(percent(x) for x in s.canary)}, each watched "
             f"{s.canary_for_ms // 1000}s)" if s.canary else "")
    view.say(f"[{stamp}] rollout of route {rec.route}: {s.old} -> {s.new}{steps}, deadline "
             f"{rec.deadline_at.astimezone():%H:%M:%S}, logs in {s.log_dir}")
    resumed = args.resume or args.abort
    view.say(f"[{stamp}] {rec.phase.value} " + (f"resumed: {rec.note}" if resumed
                                                 else "started"))
    try:
        final = driver.run(rec, first)
    except KeyboardInterrupt:
        if driver.rec is not None and driver.rec.phase.terminal:
            view.close()
            return _report(driver.rec)   # interrupted while closing down: it is over
        phase = driver.rec.phase.value if driver.rec else rec.phase.value
        driver.let_go("interrupted; resumable")
        view.close()
        print(f"cutover rollout: interrupted: the rollout of route {args.route} stays in "
              f"{phase}; continue it with `cutover rollout --resume --route {args.route}` or "
              f"roll it back with `cutover rollout --abort --route {args.route}`",
              file=sys.stderr)
        return 130
    except Superseded as exc:
        view.close()
        raise CliError(str(exc), SUPERSEDED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    view.close()
    return _report(final)


def _report(rec: RolloutRecord) -> int:
    code = EXIT.get(rec.phase, 4)
    sentence = rec.outcome or rec.note
    if code == 0:   # stdout, unless it carries the events (--events -)
        print(sentence, flush=True, file=sys.stderr if rec.spec.events == "-" else sys.stdout)
    else:
        print(f"cutover rollout: {rec.phase.value}: {sentence}", file=sys.stderr, flush=True)
    return code


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt
