"""``cutover switch``: publish the next plan of a route, after the safety checks of
cutover.control.next_plan."""

from __future__ import annotations

import argparse
import getpass
import socket
from typing import Any

from cutover.cli.cluster import cluster_args, connect, publish, route_view
from cutover.cli.errors import CliError
from cutover.cli.times import parse_at, parse_deadline, parse_duration_ms
from cutover.control.next_plan import SwitchRefused, next_plan
from cutover.plan import utcnow


def _cmd_switch(args: argparse.Namespace) -> int:
    t = connect(args)
    v = route_view(t, args.route)
    margin = parse_duration_ms(args.margin)
    now = utcnow()
    deadline = parse_deadline(args.deadline, now) if args.deadline else None
    try:
        plan, summary = next_plan(v, args.to, parse_at(args.at), margin,
                                  parse_duration_ms(args.max_lag), args.force, now,
                                  deadline=deadline,
                                  issued_by=f"{getpass.getuser()}@{socket.gethostname()}")
    except SwitchRefused as exc:
        raise CliError(str(exc)) from None
    return publish(t, plan, summary)


def register(sub: Any) -> None:
    p = sub.add_parser("switch", help="publish the next plan of a route, after safety checks")
    cluster_args(p)
    p.add_argument("--route", required=True, help="the route to switch")
    p.add_argument("--to", required=True, help="the version to make primary")
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
