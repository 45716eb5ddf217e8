"""``cutover rollout status | promote | pause | resume --route R``: a rollout seen and steered
from any host, through its journal on the status topic.

``status`` reads the newest journal record (``--watch``: every change until the rollout ends,
its exit code then the rollout's). ``promote``, ``pause`` and ``resume`` journal the rollout's
record with the change already applied and marked as an operator's request: the run that
drives the rollout applies the same change when it reads it (and says so in its next record,
which the command waits for); a rollout that nobody drives keeps it for ``--resume``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
import time
from typing import Any

from cutover.cli.cluster import broker_errors, cluster_args, connect
from cutover.cli.errors import CliError
from cutover.cli.status import describe_rollout
from cutover.cli.times import parse_duration_ms
from cutover.control.rollout_claim import JournalNotWritten, publish_record
from cutover.control.routes import StateReader, Target
from cutover.plan import utcnow
from cutover.rollout.events import Requested
from cutover.rollout.journal import (
    LEASE,
    OperatorRequest,
    Phase,
    RequestKind,
    RolloutRecord,
)
from cutover.rollout.machine import next_gate, step

EXIT = {Phase.DONE: 0, Phase.ROLLED_BACK: 1, Phase.FAILED: 4}


def _reader(args: argparse.Namespace) -> tuple[Target, StateReader]:
    t = connect(args)
    return t, StateReader(t, args.route, status_tail=None, control_tail=None)


def _latest(reader: StateReader, route: str) -> RolloutRecord:
    with broker_errors():
        rec = reader.refresh()[route].rollout
    if rec is None:
        raise CliError(f"route {route} has no rollout in its journal; start one with "
                       "`cutover rollout --route ... --to <version> ...`")
    return rec


# -- status -------------------------------------------------------------------------------------


def describe(rec: RolloutRecord) -> list[str]:
    now = utcnow()
    lines = [f"route {rec.route}: {describe_rollout(rec, now)}"]
    for span in rec.phases:
        took = int(span.seconds(now))
        lines.append(f"  {span.phase.value:<13} {span.started_at:%H:%M:%S}Z  "
                     f"{took // 60}:{took % 60:02d}" + ("" if span.ended_at else "  (now)"))
    gates = [f"{g.value}: promoted" if g in rec.promoted else
             f"{g.value}: WAITING" if g is rec.waiting_at else f"{g.value}: ahead"
             for g in rec.spec.pause_before]
    if gates:
        lines.append(f"  gates: {', '.join(gates)}")
    if rec.paused_by:
        lines.append(f"  PAUSED by {rec.paused_by}")
    return lines


def _cmd_status(args: argparse.Namespace) -> int:
    _, reader = _reader(args)
    with reader:
        rec = _latest(reader, args.route)
        _show(args, rec)
        if not args.watch:
            return 0
        shown = _key(rec)
        while not rec.phase.terminal:
            time.sleep(args.interval)
            with broker_errors():
                view = reader.refresh()[args.route]
            for new in view.rollout_log:
                if _key(new) != shown:
                    _show(args, new)
                    shown = _key(new)
                rec = new
        return EXIT[rec.phase]


def _key(rec: RolloutRecord) -> tuple[Any, ...]:
    return (rec.run_id, rec.phase, rec.note, rec.waiting_at, rec.paused_by, rec.promoted,
            rec.owner)


def _show(args: argparse.Namespace, rec: RolloutRecord) -> None:
    if args.json:
        print(json.dumps(rec.model_dump(mode="json"), indent=None if args.watch else 2),
              flush=True)
    elif args.watch:
        print(f"[{utcnow():%H:%M:%S}Z] {rec.phase.value}: {rec.outcome or rec.note}", flush=True)
    else:
        print("\n".join(describe(rec)))


# -- promote, pause, resume ---------------------------------------------------------------------


def _cmd_request(args: argparse.Namespace) -> int:
    kind = RequestKind(args.rollout_action)
    t, reader = _reader(args)
    with reader:
        last = _latest(reader, args.route)
        if last.phase.terminal:
            raise CliError(f"the rollout of route {args.route} has ended ({last.phase.value}); "
                           f"there is nothing to {kind.value}")
        _refuse_pointless(last, kind)
        by = f"{getpass.getuser()}@{socket.gethostname()}"
        changed = step(last, Requested(kind, by), utcnow()).record
        now = utcnow()
        try:
            publish_record(t, changed.model_copy(update={
                "request": OperatorRequest(kind=kind, by=by, at=now), "updated_at": now}))
        except JournalNotWritten as exc:
            raise CliError(str(exc), 3) from None
        if last.owner is None or now - last.updated_at > LEASE:
            print(f"{kind.value}: journaled for route {args.route}; no run drives the rollout "
                  f"now, so `cutover rollout --resume --route {args.route}` continues from it")
            return 0
        return _acknowledged(args, reader, changed, kind)


def _refuse_pointless(rec: RolloutRecord, kind: RequestKind) -> None:
    if kind is RequestKind.PROMOTE:
        if not rec.spec.pause_before:
            raise CliError(f"the rollout of route {rec.route} has no gate to promote past; "
                           "start a rollout with --pause-before switch|teardown to get one")
        if rec.waiting_at is None and next_gate(rec) is None:
            raise CliError(f"the rollout of route {rec.route} has passed its gates "
                           f"({', '.join(g.value for g in rec.spec.pause_before)})")
    elif kind is RequestKind.PAUSE and rec.paused_by is not None:
        raise CliError(f"the rollout of route {rec.route} is already paused (by "
                       f"{rec.paused_by})")
    elif kind is RequestKind.RESUME and rec.paused_by is None:
        raise CliError(f"the rollout of route {rec.route} is not paused")


def _acknowledged(args: argparse.Namespace, reader: StateReader, want: RolloutRecord,
                  kind: RequestKind) -> int:
    """Wait until the driving run journals the change itself."""
    deadline = time.monotonic() + parse_duration_ms(args.timeout) / 1000
    while time.monotonic() < deadline:
        with broker_errors():
            log = reader.refresh()[args.route].rollout_log
        for rec in log:
            if rec.request is None and rec.claim == want.claim and _applied(rec, want, kind):
                print(f"{kind.value}: the rollout of route {args.route} took it "
                      f"({rec.phase.value}: {rec.note})")
                return 0
        time.sleep(0.3)
    print(f"{kind.value}: journaled for route {args.route}, not yet taken by the run that "
          f"drives it (pid {want.owner.pid if want.owner else '?'}); it applies it when it "
          "reads the journal, or a `--resume` does", file=sys.stderr)
    return 4


def _applied(rec: RolloutRecord, want: RolloutRecord, kind: RequestKind) -> bool:
    if kind is RequestKind.PAUSE:
        return rec.paused_by is not None
    if kind is RequestKind.RESUME:
        return rec.paused_by is None
    return set(want.promoted) <= set(rec.promoted) or rec.phase.terminal


# -- the parsers --------------------------------------------------------------------------------


def register_actions(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="rollout_action", metavar="[status|promote|pause|resume]",
                           help="act on a rollout under way, from any host (without one: "
                                "start or continue a rollout)")
    q = sub.add_parser("status", help="the route's rollout from its journal, from any host")
    cluster_args(q)
    q.add_argument("--route", required=True, help="the route")
    q.add_argument("--watch", action="store_true",
                   help="print each change until the rollout ends; exit as it does (0 done, "
                        "1 rolled back, 4 failed)")
    q.add_argument("--json", action="store_true", help="the journal record as JSON (one line "
                                                       "per change with --watch)")
    q.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    q.set_defaults(func=_cmd_status)
    for kind, what in ((RequestKind.PROMOTE, "let the rollout pass the gate it waits at (or "
                                             "its next one)"),
                       (RequestKind.PAUSE, "hold the rollout where it is (a rollback still "
                                           "runs on its own)"),
                       (RequestKind.RESUME, "let a paused rollout go on")):
        q = sub.add_parser(kind.value, help=what)
        cluster_args(q)
        q.add_argument("--route", required=True, help="the route")
        q.add_argument("--timeout", default="15s",
                       help="how long to wait for the driving run to take the request")
        q.set_defaults(func=_cmd_request)
