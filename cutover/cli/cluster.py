"""What every operator command that talks to the cluster shares: where the cluster is
(``--config`` or ``--bootstrap``), waiting for it, and the library errors turned into the
CLI's sentences and exit codes (3: the broker did not answer)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from cutover.cli.errors import CliError
from cutover.cli.settings_file import settings_file
from cutover.control.routes import (
    PlanNotPublished,
    RouteView,
    Target,
    publish_plan,
    read_views,
    target_from_settings,
)
from cutover.plan import CutoverPlan, PlanRejected
from router.base.kafka_io import BrokerUnavailable, base_conf, wait_for_broker

BROKER_DOWN = 3   # exit code: the broker did not answer


def cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="the router's settings file (topics, security)")
    p.add_argument("--bootstrap", help="HOST:PORT, when there is no settings file at hand "
                                       "(with --config: overrides its bootstrap)")
    p.add_argument("--control-topic", default="bg.control",
                   help="the plans' topic, without --config")
    p.add_argument("--status-topic", default="bg.status",
                   help="the workers' status topic, without --config")


def target_of(args: argparse.Namespace) -> Target:
    if getattr(args, "config", None):
        return target_from_settings(settings_file(args.config), args.bootstrap)
    if not getattr(args, "bootstrap", None):
        raise CliError("say where the cluster is: --config FILE (the router's settings) or "
                       "--bootstrap HOST:PORT")
    return Target(base_conf(args.bootstrap), args.control_topic, args.status_topic)


@contextmanager
def broker_errors() -> Iterator[None]:
    """A broker that does not answer is exit code 3, with the reader's sentence."""
    try:
        yield
    except BrokerUnavailable as exc:
        raise CliError(str(exc), BROKER_DOWN) from None


def connect(args: argparse.Namespace) -> Target:
    """The cluster the command names, once it answers (within 10 s)."""
    t = target_of(args)
    with broker_errors():
        wait_for_broker({k: v for k, v in t.conf.items() if k != "logger"} | {"log_level": 0},
                        give_up_after=10)
    return t


def route_view(t: Target, route: str) -> RouteView:
    with broker_errors():
        return read_views(t, route)[route]


def publish_quietly(t: Target, plan: CutoverPlan) -> CutoverPlan:
    """Publish ``plan``; return it as published (signed when a plan key is set)."""
    try:
        return publish_plan(t, plan)
    except PlanRejected as exc:
        raise CliError(f"the plan would be rejected: {exc.reason}") from None
    except PlanNotPublished as exc:
        raise CliError(str(exc), BROKER_DOWN) from None


def publish(t: Target, plan: CutoverPlan, summary: str) -> int:
    publish_quietly(t, plan)
    print(f"published {summary}")
    return 0
