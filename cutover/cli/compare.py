"""``cutover compare``: both versions' outputs of a route, record by record, for a while.

The same comparison ``cutover rollout --compare`` runs before it switches
(cutover.control.comparison): the raw topics are watched for ``--for``, records both versions
emitted for the same event times are matched by the route's identity and counted equal, different,
only in the old version or only in the new one, per partition, with samples of the differences. Exit
0 when the share that differs is within ``--max-diff``, 1 when it is over (or nothing could be
compared). The versions are named as ``switch`` and ``rollout`` name them: ``--to`` the new one,
``--from`` the one it replaces (``--new``/``--old`` still work, with a warning).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cutover.cli.cluster import broker_errors, cluster_args, connect, route_view
from cutover.cli.errors import CliError
from cutover.cli.parsing import Deprecated
from cutover.cli.rollout import parse_fraction
from cutover.cli.settings_file import route_in, settings_file
from cutover.cli.times import parse_duration_ms
from cutover.control.compare_reader import RawTopicMissing, compare_route
from cutover.rollout.journal import CompareSummary


def print_summary(s: CompareSummary) -> None:
    print(f"{'part':>4} {'from':>15} {'to':>15} {'equal':>8} {'different':>9} "
          f"{'only ' + s.old:>12} {'only ' + s.new:>12}")
    for p, c in sorted(s.partitions.items()):
        lo, hi = s.ranges[p]
        print(f"{p:>4} {lo:>15} {hi:>15} {c.equal:>8} {c.different:>9} {c.only_old:>12} "
              f"{c.only_new:>12}")
    if s.samples:
        print("samples:")
        for line in s.samples:
            print(f"  {line}")
    print(("within the limit: " if s.passed else "OVER the limit: ") + s.headline())


def _cmd_compare(args: argparse.Namespace) -> int:
    route = route_in(settings_file(args.config), args.route, args.config)
    if not args.new:
        raise CliError("name the version to check with --to (e.g. --to green)")
    t = connect(args)
    old = args.old
    if old is None:
        plan = route_view(t, args.route).plan
        if plan is None:
            raise CliError(f"route {args.route} has no plan to take the old version from; "
                           "name it with --old")
        old = plan.segments[-1].primary
    if old == args.new:
        raise CliError(f"--old and --new are both {old!r}; name two versions")
    seconds = parse_duration_ms(args.for_) / 1000
    print(f"watching {', '.join(route.inputs)} for {seconds:.0f}s: {old} against {args.new}",
          flush=True)
    try:
        with broker_errors():
            summary = compare_route(t.conf, route, old, args.new, seconds,
                                    parse_fraction(args.max_diff), args.samples)
    except RawTopicMissing as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(summary.model_dump(mode="json") | {
            "counts": summary.counts.model_dump(), "diff_ratio": summary.diff_ratio,
            "passed": summary.passed}, indent=2))
    else:
        print_summary(summary)
    return 0 if summary.passed else 1


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="compare two versions' outputs record by record")
    cluster_args(p)
    p.set_defaults(func=_cmd_compare)
    p.add_argument("--route", required=True, help="the route whose versions to compare")
    p.add_argument("--to", dest="new", metavar="VERSION",
                   help="the version to check (the one a switch would go to)")
    p.add_argument("--from", dest="old", metavar="VERSION",
                   help="the version to check against (default: the primary now)")
    p.add_argument("--new", dest="new", action=Deprecated, use="--to", metavar="VERSION")
    p.add_argument("--old", dest="old", action=Deprecated, use="--from", metavar="VERSION")
    p.add_argument("--for", dest="for_", default="2m", help="how long to watch")
    p.add_argument("--max-diff", default="0.1%", help="share of records allowed to differ")
    p.add_argument("--samples", type=int, default=5, help="differences to show")
    p.add_argument("--json", action="store_true", help="the counts and samples as JSON")
    # the route's inputs and identity come from the settings file
    for action in p._actions:
        if action.dest == "config":
            action.required = True
