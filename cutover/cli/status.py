"""``cutover status`` and ``cutover wait``: the routes' merged state, as a table, as JSON, or
as an exit code (``wait``: 0 clear to tear down, 3 stalled, 4 timeout, 5 no transition, 6 a
canary handed over while the old version is still primary for the other keys)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

from cutover.cli.cluster import broker_errors, cluster_args, connect
from cutover.cli.errors import CliError
from cutover.cli.times import parse_duration_ms
from cutover.control.routes import RouteView, StateReader, read_views
from cutover.plan import utcnow
from cutover.rollout.journal import RolloutRecord
from cutover.status import Transition, TransitionState


def _merged_json(v: RouteView) -> dict[str, Any]:
    tr = v.transition()
    between = v.between_owners()
    return {
        "route": v.route, "epoch": v.plan.epoch if v.plan else None,
        "transition": tr.model_dump(mode="json", by_alias=True),
        "num_partitions": v.num_partitions,
        "partitions": {str(p): {**ps.model_dump(mode="json"), "epoch": e, "worker": w,
                                "updated_at": u.isoformat(), "between_owners": p in between}
                       for p, (ps, e, w, u) in sorted(v.partitions.items())},
        "counters": v.counters.model_dump(mode="json"),
        "plan": v.plan.model_dump(mode="json") if v.plan else None,
        "last_rejection": v.rejections[-1].model_dump(mode="json") if v.rejections else None,
        "rollout": v.rollout.model_dump(mode="json") if v.rollout else None,
        "unreadable_status": dict(sorted(v.unreadable.items())),
    }


def describe_rollout(r: RolloutRecord, now: datetime) -> str:
    """One line: the route's rollout, its phase and who drives it."""
    since = int((now - r.phase_started()).total_seconds())
    step = f", {r.step_line()}" if r.spec.canary else ""
    line = (f"rollout {r.spec.old} -> {r.spec.new}: {r.phase.value}{step}"
            f" (since {r.phase_started():%H:%M:%S}Z, {since // 60}:{since % 60:02d})")
    if r.phase.terminal:
        return f"{line}: {r.outcome or r.note}"
    heard = int((now - r.updated_at).total_seconds())
    by = (f"pid {r.owner.pid} on {r.owner.host}, heard {heard}s ago" if r.owner
          else "driven by nobody: resume it with `cutover rollout --resume`")
    return f"{line}, deadline {r.deadline_at:%H:%M:%S}Z, {by}: {r.note}"


def _print_table(v: RouteView) -> None:
    tr = v.transition()
    epoch = v.plan.epoch if v.plan else "-"
    print(f"route {v.route}  epoch {epoch}  transition {tr.state.value}", end="")
    if tr.from_ is not None:
        print(f"  {tr.from_} -> {tr.to} at {tr.boundary}", end="")
    if tr.share is not None:
        print(f"  canary {tr.share:.2%} of the keys", end="")
    print()
    if tr.holdups:
        print(f"  waiting on: {tr.describe_holdups()}")
    if v.rollout is not None:
        print(f"  {describe_rollout(v.rollout, utcnow())}")
    note = v.unreadable_note()
    if note is not None:
        print(f"  warning: {note}")
    versions = sorted({ver for ps, *_ in v.partitions.values() for ver in ps.watermarks})
    head = (f"  {'part':>4} {'worker':<18} {'epoch':>5} {'boundary':>15} {'horizon':>15} "
            f"{'held':>6} ") + " ".join(
        f"{'wm ' + ver:>16} {'lag':>8}" for ver in versions)
    print(head)
    between, now = v.between_owners(), utcnow()
    for p in range(v.num_partitions or 0) if v.num_partitions else sorted(v.partitions):
        if p not in v.partitions:
            print(f"  {p:>4} {'(no router)':<18}")
            continue
        ps, e, w, at = v.partitions[p]
        cells = []
        for ver in versions:
            wm = ps.watermarks.get(ver)
            lag = (ps.horizon - wm) if (wm is not None and ps.horizon is not None) else None
            cells.append(f"{wm if wm is not None else '-':>16} "
                         f"{lag if lag is not None else '-':>8}")
        print(f"  {p:>4} {w[:18]:<18} {e if e is not None else '-':>5} "
              f"{ps.boundary if ps.boundary is not None else '-':>15} "
              f"{ps.horizon if ps.horizon is not None else '-':>15} "
              f"{ps.held:>6} " + " ".join(cells) + ("  PAUSED (max_held)" if ps.paused else "")
              + (f"  between owners: last report {int((now - at).total_seconds())}s ago"
                 if p in between else ""))
    c = v.counters
    sup = ", ".join(f"{k}={n}" for k, n in sorted(c.suppressed.items())) or "0"
    print(f"  forwarded {c.forwarded}  suppressed {sup}  duplicates {c.duplicates}  "
          f"dead-lettered {c.dead_lettered}  held {c.held}  pauses {c.pauses}"
          + (f"  read again {c.reread}" if c.reread else ""))
    if v.rejections:
        r = v.rejections[-1]
        print(f"  last rejected plan: epoch {r.epoch}: {r.reason}")


def _cmd_status(args: argparse.Namespace) -> int:
    t = connect(args)
    with broker_errors():
        views = read_views(t, args.route)
    for v in views.values():
        note = v.unreadable_note()
        if note is not None and args.json:
            print(f"route {v.route}: warning: {note}", file=sys.stderr)
    if args.route and args.route in views and not views[args.route].workers \
            and views[args.route].plan is None and not views[args.route].unreadable:
        raise CliError(f"no plan and no status for route {args.route!r}; check the route name "
                       "and that a router is running")
    if args.json:
        print(json.dumps({r: _merged_json(v) for r, v in sorted(views.items())}, indent=2))
    else:
        for _, v in sorted(views.items()):
            _print_table(v)
    return 0


def _cmd_wait(args: argparse.Namespace) -> int:
    t = connect(args)
    want = (TransitionState.HANDED_OVER if args.for_ == "handed-over"
            else TransitionState.CLEAR_TO_TEARDOWN)
    timeout = parse_duration_ms(args.timeout) / 1000
    deadline = time.monotonic() + timeout
    with broker_errors(), StateReader(t, args.route) as reader:
        return _wait_loop(args, reader, want, deadline)


def _wait_loop(args: argparse.Namespace, reader: StateReader, want: TransitionState,
               deadline: float) -> int:
    """Poll one open reader: each round reads only what the workers published since."""
    while True:
        v = reader.refresh()[args.route]
        last = v.transition()
        epoch = v.plan.epoch if v.plan else "-"
        if last.state is TransitionState.CLEAR_TO_TEARDOWN:
            return _waited(args, v, 0, f"route {args.route}: CLEAR_TO_TEARDOWN — {last.from_!r} "
                                       f"may be torn down (epoch {epoch}, "
                                       f"boundary {last.boundary})")
        if last.state is TransitionState.HANDED_OVER:
            return _waited(args, v, 0 if want is TransitionState.HANDED_OVER else 6,
                           handed_over(args.route, last, epoch))
        if last.state is TransitionState.STALLED:
            return _waited(args, v, 3, f"route {args.route}: STALLED: {last.describe_holdups()}. "
                                       "Roll back with `cutover switch --to <old>` or extend the "
                                       "deadline.")
        if last.state is TransitionState.STEADY and v.plan is not None:
            return _waited(args, v, 5, f"route {args.route}: STEADY (no transition in plan epoch "
                                       f"{v.plan.epoch})")
        if time.monotonic() >= deadline:
            note = v.unreadable_note()
            return _waited(args, v, 4, f"route {args.route}: still {last.state.value} after "
                                       f"{args.timeout}: "
                                       f"{last.describe_holdups() or 'no router status yet'}"
                           + (f"\nroute {args.route}: {note}" if note is not None else ""))
        time.sleep(min(args.interval, max(deadline - time.monotonic(), 0.05)))


def handed_over(route: str, tr: Transition, epoch: object) -> str:
    """The sentence of a canary whose keys are handed over: the old version stays."""
    share = f"{tr.share:.2%}" if tr.share is not None else "a share"
    return (f"route {route}: HANDED_OVER — {tr.to!r} is primary for its canary's {share} of "
            f"the keys from {tr.boundary} (epoch {epoch}), but {tr.from_!r} is still the "
            f"primary of every other key and must keep running; end the canary with `cutover "
            f"switch --route {route} --to {tr.to}` (every key) or `--to {tr.from_}` (the "
            "rollback), then wait for CLEAR_TO_TEARDOWN")


def _waited(args: argparse.Namespace, v: RouteView, code: int, sentence: str) -> int:
    """The outcome: the sentence (stdout when clear, else stderr), and with --json the route's
    merged state and the outcome as one JSON object on stdout."""
    if args.json:
        print(sentence, file=sys.stderr)
        print(json.dumps({"route": args.route, "exit_code": code,
                          "state": v.transition().state.value, "sentence": sentence,
                          "status": _merged_json(v)}, indent=2))
    else:
        print(sentence, file=sys.stdout if code == 0 else sys.stderr)
    return code


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="show routes, transitions, partitions and counters")
    cluster_args(p)
    p.add_argument("--route", help="show one route (default: every route with a plan or status)")
    p.add_argument("--json", action="store_true", help="the merged state as JSON")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("wait", help="block until a transition is clear to tear down")
    cluster_args(p)
    p.add_argument("--route", required=True, help="the route whose transition to wait for")
    p.add_argument("--for", dest="for_", default="clear-to-teardown",
                   choices=["clear-to-teardown", "handed-over"],
                   help="the state to wait for: clear-to-teardown (the old version may be "
                        "stopped; a canary handed over exits 6 at once, since its old version "
                        "must keep running) or handed-over (also a canary's keys handed over)")
    p.add_argument("--timeout", default="10m", help="how long to wait (a duration: 90s, 15m)")
    p.add_argument("--json", action="store_true",
                   help="the outcome as one JSON object on stdout (the exit code as without)")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_wait)
