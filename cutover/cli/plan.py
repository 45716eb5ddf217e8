"""``cutover plan validate | show | init``.

``plan init`` is the first-plan step of ``cutover init`` alone, for clusters whose topics are
made by another tool (docs/decisions/004-cutover-init.md)."""

from __future__ import annotations

import argparse
import getpass
import json
import socket
from pathlib import Path
from typing import Any

from cutover.cli.cluster import cluster_args, connect, publish, route_view
from cutover.cli.errors import CliError
from cutover.plan import CutoverPlan, PlanRejected, Segment, parse_plan, plan_key_from_env, utcnow


def _cmd_plan_validate(args: argparse.Namespace) -> int:
    try:
        raw = Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        plan = parse_plan(raw, key=plan_key_from_env())
    except PlanRejected as exc:
        raise CliError(f"{args.file}: plan rejected: {exc.reason}", 1) from None
    if args.json:
        print(json.dumps({"file": args.file, "valid": True,
                          "plan": plan.model_dump(mode="json")}, indent=2))
        return 0
    print(f"{args.file}: valid plan for route {plan.route}, epoch {plan.epoch}: "
          f"{_timeline(plan)}")
    return 0


def _timeline(plan: CutoverPlan) -> str:
    tr = plan.transition
    return f"{tr[0]} -> {tr[1]} at {tr[2]}" if tr else f"{plan.segments[0].primary} only"


def _cmd_plan_show(args: argparse.Namespace) -> int:
    t = connect(args)
    v = route_view(t, args.route)
    if v.plan is None:
        raise CliError(f"route {args.route!r} has no plan yet; publish one with `cutover "
                       f"switch --route {args.route} --to <version> --at auto`", 1)
    if args.json:
        print(json.dumps(v.plan.model_dump(mode="json"), indent=2))
        return 0
    p = v.plan
    print(f"route {p.route}  epoch {p.epoch}  issued {p.issued_at:%Y-%m-%dT%H:%M:%SZ} by "
          f"{p.issued_by}" + (f"  deadline {p.deadline:%Y-%m-%dT%H:%M:%SZ}" if p.deadline
                              else ""))
    for seg in p.segments:
        start = "the beginning" if seg.from_event_time is None else seg.from_event_time
        print(f"  from {start}: {seg.primary}")
    return 0


def _cmd_plan_init(args: argparse.Namespace) -> int:
    t = connect(args)
    v = route_view(t, args.route)
    if v.plan is not None:
        raise CliError(f"route {args.route} already has a plan (epoch {v.plan.epoch}); use "
                       "`cutover switch` to change it")
    plan = CutoverPlan(route=args.route, epoch=(v.control_epoch or 0) + 1,
                       segments=(Segment(from_event_time=None, primary=args.primary),),
                       issued_at=utcnow(), issued_by=f"{getpass.getuser()}@{socket.gethostname()}")
    return publish(t, plan, f"first plan for route {args.route}: {args.primary} is primary")


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="validate, show or initialise plans")
    psub = p.add_subparsers(dest="plan_command", metavar="ACTION", required=True,
                            help="what to do with plans")
    q = psub.add_parser("validate", help="check a plan file as the router would")
    q.add_argument("file", help="the plan, a JSON file")
    q.add_argument("--json", action="store_true", help="the plan as the router would read it")
    q.set_defaults(func=_cmd_plan_validate)
    q = psub.add_parser("show", help="print the current plan of a route")
    cluster_args(q)
    q.add_argument("--route", required=True, help="the route whose plan to show")
    q.add_argument("--json", action="store_true", help="the plan as JSON")
    q.set_defaults(func=_cmd_plan_show)
    q = psub.add_parser("init", help="publish the first plan of a route (one primary); "
                                     "`cutover init` does this and creates the topics")
    cluster_args(q)
    q.add_argument("--route", required=True, help="the route")
    q.add_argument("--primary", required=True, help="the version running now")
    q.set_defaults(func=_cmd_plan_init)
