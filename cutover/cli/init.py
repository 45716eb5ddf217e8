"""``cutover init``: make a route ready for its first deploy, in one idempotent command.

It creates the topics the route needs that are missing (:mod:`cutover.cli.route_topics`: the
raw topic's partition count for the output, dead-letter and shadow topics; compacted control,
status and checkpoint topics), checks the ones that exist, prints the ACLs each principal needs
(:mod:`cutover.access`, the table ``cutover doctor`` checks), and publishes the route's first
plan (one primary), unless it has one. Run again, it changes nothing and says so. Why the
first plan is folded in and ``cutover plan init`` kept: docs/decisions/004-cutover-init.md.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from pydantic import BaseModel, ConfigDict

from cutover.access import Role, required_rights
from cutover.cli.cluster import broker_errors, connect, publish_quietly, route_view
from cutover.cli.errors import CliError
from cutover.cli.route_topics import TopicRole, TopicSpec, route_topics, topic_problem
from cutover.cli.settings_file import route_in, settings_file
from cutover.plan import CutoverPlan, Segment, utcnow
from cutover.settings import RouterSettings, RouteSettings

_PRINCIPALS = {Role.ROUTER: "User:cutover-router", Role.OPERATOR: "User:cutover-operator",
               Role.JOB: "User:cutover-job"}


class TopicOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: TopicRole
    partitions: int
    compacted: bool
    created: bool


class InitReport(BaseModel):
    """What ``cutover init`` did, for ``--json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    route: str
    partitions: int
    topics: tuple[TopicOutcome, ...]
    acls: dict[str, tuple[str, ...]]
    plan: dict[str, Any]
    plan_published: bool


def _cmd_init(args: argparse.Namespace) -> int:
    settings = settings_file(args.config)
    route = route_in(settings, args.route, args.config)
    t = connect(args)
    admin = AdminClient({k: v for k, v in t.conf.items() if k != "log_level"})
    with broker_errors():
        outcomes = _topics(admin, settings, route, args)
    acls = {role.value: tuple(r.kafka_acls(getattr(args, f"{role.value}_principal"),
                                           settings.bootstrap)
                              for r in required_rights(settings, role, route.name))
            for role in Role}
    view = route_view(t, route.name)
    if view.plan is not None:
        plan, published = view.plan, False
    else:
        if not args.primary:
            raise CliError(f"route {route.name} has no plan yet: name the version running now "
                           f"with --primary (e.g. --primary blue)")
        plan = CutoverPlan(route=route.name, epoch=(view.control_epoch or 0) + 1,
                           segments=(Segment(from_event_time=None, primary=args.primary),),
                           issued_at=utcnow(),
                           issued_by=f"{getpass.getuser()}@{socket.gethostname()}")
        plan = publish_quietly(t, plan)
        published = True
    report = InitReport(route=route.name, partitions=outcomes[0].partitions,
                        topics=tuple(outcomes), acls=acls,
                        plan=plan.model_dump(mode="json"), plan_published=published)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        _print(report, args.primary)
    return 0


def _topics(admin: AdminClient, settings: RouterSettings, route: RouteSettings,
            args: argparse.Namespace) -> list[TopicOutcome]:
    """Create the missing topics, check the others; refuse with every problem at once."""
    existing = {name: len(md.partitions) for name, md in
                admin.list_topics(timeout=10).topics.items() if md.error is None}
    raw_counts = {existing[t] for t in route.inputs if t in existing}
    if len(raw_counts) > 1:
        raise CliError(f"the raw topics of route {route.name} have different partition counts "
                       f"({', '.join(f'{t}: {existing[t]}' for t in route.inputs)}); give "
                       "them one")
    if raw_counts:
        n = raw_counts.pop()
        if args.partitions is not None and args.partitions != n:
            raise CliError(f"--partitions {args.partitions} but raw topic {route.inputs[0]} "
                           f"has {n}; drop --partitions (the raw topic's count is used)")
    elif args.partitions is not None:
        n = args.partitions
    else:
        raise CliError(f"raw topic {route.inputs[0]} does not exist yet; pass --partitions N "
                       "to create it (N: the partitions the job's output should have)")
    specs = route_topics(settings, route, n)
    problems: list[str] = []
    missing = [s for s in specs if s.name not in existing]
    if not args.skip_topics:
        _create(admin, missing, args.replication_factor)
    elif missing:
        problems += [f"{s.role.value} topic {s.name} does not exist (--skip-topics: create it "
                     f"with {s.partitions} partitions"
                     + (", cleanup.policy=compact)" if s.compacted else ")") for s in missing]
    configs = _configs(admin, [s.name for s in specs if s.name in existing])
    for s in specs:
        if s.name in existing:
            problem = topic_problem(s, existing[s.name], configs.get(s.name))
            if problem is not None:
                problems.append(problem)
    if problems:
        raise CliError("; ".join(problems))
    return [TopicOutcome(name=s.name, role=s.role, partitions=s.partitions,
                         compacted=s.compacted, created=s.name not in existing) for s in specs]


def _create(admin: AdminClient, specs: list[TopicSpec], replication: int) -> None:
    if not specs:
        return
    new = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication,
                    config=s.config) for s in specs]
    for name, fut in admin.create_topics(new, request_timeout=15).items():
        try:
            fut.result(timeout=20)
        except KafkaException as exc:
            err = exc.args[0]
            reason = err.str() if hasattr(err, "str") else str(exc)
            if "already exists" in reason.lower():
                continue
            raise CliError(f"could not create topic {name} ({reason}); the principal of the "
                           "settings needs Create on the cluster (or create the topics with "
                           "an admin's credentials and run init with --skip-topics)", 3) from None


def _configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """Existing topics' configs, where this principal may read them."""
    if not names:
        return {}
    out: dict[str, dict[str, str]] = {}
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n)
                                      for n in names], request_timeout=15)
    for res, fut in futures.items():
        try:
            entries = fut.result(timeout=20)
        except KafkaException:
            continue   # no DescribeConfigs right: partition counts are still checked
        out[res.name] = {k: str(e.value) for k, e in entries.items() if e.value is not None}
    return out


def _print(r: InitReport, primary: str | None) -> None:
    print(f"route {r.route}: {r.partitions} partitions")
    for t in r.topics:
        how = "created" if t.created else "exists, checked"
        kind = "compacted, " if t.compacted else ""
        print(f"  {t.role.value:<12} {t.name:<40} {kind}{t.partitions} partition(s): {how}")
    print("ACLs each principal needs (run by an ACL administrator; cutover doctor checks them):")
    for role, lines in r.acls.items():
        print(f"  # {role}")
        for line in lines:
            print(f"  {line}")
    print("  # consumers of the output: Read on the output topic and on their own group; "
          "isolation.level=read_committed")
    first = r.plan["segments"][-1]["primary"]
    if r.plan_published:
        print(f"published the first plan of route {r.route}: {first} is primary "
              f"(epoch {r.plan['epoch']})")
    else:
        note = (f"; --primary {primary} ignored" if primary and primary != first else "")
        print(f"route {r.route} already has a plan (epoch {r.plan['epoch']}, {first} primary): "
              f"left as it is{note}")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init", help="create a route's topics, print the ACLs it needs, publish its first plan",
        description="Make a route ready for its first deploy: create the topics it needs "
                    "(output, dead letter and shadow with the raw topic's partitions; "
                    "compacted control, status and checkpoint topics), check those that exist, "
                    "print the ACLs of each principal, and publish the first plan (one "
                    "primary) unless the route has one. Safe to run again.")
    p.add_argument("--config", required=True,
                   help="the router's settings file (topics, security)")
    p.add_argument("--bootstrap", help="HOST:PORT, overriding the settings' bootstrap")
    p.add_argument("--route", required=True, help="the route to make ready")
    p.add_argument("--primary", help="the version running now (its bg.version), primary in the "
                                     "first plan; needed while the route has no plan")
    p.add_argument("--partitions", type=int,
                   help="create the raw topic with this many partitions when it does not exist "
                        "(default: the raw topic's own count)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="of the topics created (-1: the broker's default.replication.factor)")
    p.add_argument("--skip-topics", action="store_true",
                   help="create nothing (topics managed elsewhere): only check them")
    for role, principal in _PRINCIPALS.items():
        p.add_argument(f"--{role.value}-principal", default=principal,
                       help=f"the {role.value} identity in the ACLs printed")
    p.add_argument("--json", action="store_true", help="what was done, as JSON")
    p.set_defaults(func=_cmd_init, control_topic="bg.control", status_topic="bg.status")
