"""``cutover switch``: publish the next plan of a route, after the safety checks of
cutover.control.next_plan."""

from __future__ import annotations

import argparse
import getpass
import socket
from typing import Any

from cutover.cli.cluster import cluster_args, connect, publish, route_view
from cutover.cli.errors import CliError
from cutover.cli.shares import parse_canary
from cutover.cli.times import parse_at, parse_deadline, parse_duration_ms
from cutover.control.next_plan import SwitchRefused, next_canary_plan, next_plan
from cutover.plan import utcnow


def _cmd_switch(args: argparse.Namespace) -> int:
    if (args.to is None) == (args.canary is None):
        raise CliError("name what to switch to: --to VERSION (every key) or --canary "
                       "VERSION:SHARE (a share of the keys, e.g. --canary green:5%), not both")
    canary = parse_canary(args.canary) if args.canary is not None else None
    margin = parse_duration_ms(args.margin)
    max_lag = parse_duration_ms(args.max_lag)
    at = parse_at(args.at)
    now = utcnow()
    deadline = parse_deadline(args.deadline, now) if args.deadline else None
    t = connect(args)
    v = route_view(t, args.route)
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        if canary is not None:
            plan, summary = next_canary_plan(v, canary, at, margin, max_lag, args.force, now,
                                             deadline=deadline, issued_by=by)
        else:
            plan, summary = next_plan(v, args.to, at, margin, max_lag, args.force, now,
                                      deadline=deadline, issued_by=by)
    except SwitchRefused as exc:
        raise CliError(str(exc)) from None
    return publish(t, plan, summary)


def register(sub: Any) -> None:
    p = sub.add_parser("switch", help="publish the next plan of a route, after safety checks")
    cluster_args(p)
    p.add_argument("--route", required=True, help="the route to switch")
    p.add_argument("--to", help="the version to make primary for every key (during a canary: "
                                "its version gives it every key, the primary rolls it back)")
    p.add_argument("--canary", metavar="VERSION:SHARE",
                   help="give VERSION a share of the keys (e.g. green:5%%), the primary keeping "
                        "the rest; a later --canary with a larger share widens it")
    p.add_argument("--at", default="auto",
                   help="boundary event time: epoch ms, ISO-8601, +duration past the newest "
                        "horizon, or auto")
    p.add_argument("--deadline", help="when the transition counts as stalled: a duration "
                                      "from now (15m, +2h) or an ISO-8601 time")
    p.add_argument("--margin", default="10s",
                   help="how far ahead of every partition's horizon the boundary must be")
    p.add_argument("--max-lag", default="60s",
                   help="how far the target version's watermark may trail the leading one")
    p.add_argument("--force", action="store_true", help="skip the safety checks")
    p.set_defaults(func=_cmd_switch)
