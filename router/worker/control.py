"""The control topic, read by every worker as a broadcast, and plan recovery at start.

Every worker is assigned all control partitions from the beginning (no consumer group), so a
plan reaches every partition owner. Garbage there (not JSON, huge, wrong types, no key) becomes
a plan_rejected event; nothing on the control topic can stop a worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from cutover.plan import CutoverPlan, PlanBook, PlanRejected, parse_plan
from cutover.settings import RouterSettings
from cutover.status import UnreadableStatus, read_status
from router.base.kafka_io import offsets_range, partitions_of, read_to_end, reader_conf

log = logging.getLogger("cutover.router")



@dataclass(frozen=True, slots=True)
class PlanAccepted:
    """A plan with a newer epoch than the one held: every owned partition applies it."""

    plan: CutoverPlan


@dataclass(frozen=True, slots=True)
class PlanRefused:
    """A control record that did not become the plan: invalid, or ``stale`` (an epoch not
    above the one held). Published as a plan_rejected status event."""

    route: str | None
    rejected: PlanRejected
    stale: bool = False


ControlEvent = PlanAccepted | PlanRefused


class ControlReader:
    def __init__(self, conf: dict[str, Any], settings: RouterSettings, book: PlanBook) -> None:
        self.settings = settings
        self.book = book
        self.routes = {r.name for r in settings.routes}
        self.topic = settings.control_topic
        n = partitions_of(conf, self.topic)
        self.consumer = Consumer({**reader_conf(conf), "fetch.max.bytes": 8 * 1024 * 1024})
        self.partitions = n or 0
        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                              for p in range(self.partitions)])
        self.caught_up = False

    def catch_up(self, timeout: float = 60.0) -> list[ControlEvent]:
        """Read every partition to its end (quietly: replays are not news)."""
        events: list[ControlEvent] = []
        pending = set(range(self.partitions))
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in self.consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    continue
                ev = self._offer(msg.key(), msg.value())
                if ev is not None and not (isinstance(ev, PlanRefused) and ev.stale):
                    events.append(ev)
        if pending:
            log.warning("control topic %s: partitions %s not read to the end at start",
                        self.topic, sorted(pending))
        self.caught_up = True
        return events

    def poll(self) -> list[ControlEvent]:
        events: list[ControlEvent] = []
        for msg in self.consumer.consume(100, 0):
            if msg.error() is not None:
                continue
            ev = self._offer(msg.key(), msg.value())
            if ev is not None:
                events.append(ev)
        return events

    def _offer(self, key: bytes | None, value: bytes | None) -> ControlEvent | None:
        try:
            route = key.decode() if key is not None else None
        except UnicodeDecodeError:
            route = None
        if route is not None and route not in self.routes:
            return None  # another deployment's route
        if route is None:
            return PlanRefused(None, PlanRejected("control record has no (UTF-8) key; the key "
                                                  "is the route name"))
        try:
            kind, outcome = self.book.offer(route, value)
        except Exception as exc:  # a plan must never stop a worker
            return PlanRefused(route, PlanRejected(f"unreadable plan ({exc})"))
        if isinstance(outcome, PlanRejected):
            log.warning("route %s: rejected plan: %s", route, outcome)
            return PlanRefused(route, outcome)
        if kind == "accepted":
            log.info("route %s: accepted plan epoch %d", route, outcome.epoch)
            return PlanAccepted(outcome)
        held = self.book.plans[route]
        if outcome == held:
            return None  # a replay of the plan held
        return PlanRefused(route, PlanRejected(
            f"stale plan: epoch {outcome.epoch} is not greater than the epoch held "
            f"({held.epoch}); publish epoch {held.epoch + 1} or later", epoch=outcome.epoch,
            route=route), stale=True)

    def close(self) -> None:
        self.consumer.close()


def recover_plans(conf: dict[str, Any], settings: RouterSettings,
                  key: bytes | None) -> list[CutoverPlan]:
    """The last good plan of each route found on the status topic (every status message carries
    it), so a restart keeps it even if the control topic's newest record is bad."""
    routes = {r.name for r in settings.routes}
    n = partitions_of(conf, settings.status_topic)
    if n is None:
        return []
    # Every status message carries its worker's plan, so the newest plan of a route that has
    # workers is in the topic's tail: read that first (start-up must not grow with the
    # topic's history), and all of it only if a route has no plan there.
    tail = _tail_starts(conf, settings.status_topic, n, STATUS_TAIL)
    best, unreadable = _plans_in(conf, settings.status_topic, routes, key, tail)
    if set(best) != routes and any(start > 0 for start in tail.values()):
        best, unreadable = _plans_in(conf, settings.status_topic, routes, key, None)
    if unreadable:
        log.warning("status topic %s: status messages of workers %s cannot be read by this "
                    "version (%s); the plans they carry are not used to recover (the control "
                    "topic's are). Run every worker of the group on one version",
                    settings.status_topic, sorted(unreadable), next(iter(unreadable.values())))
    return list(best.values())


# How many of the status topic's newest records per partition a start-up reads first.
STATUS_TAIL = 5000


def _tail_starts(conf: dict[str, Any], topic: str, partitions: int, tail: int) -> dict[int, int]:
    """Where the last ``tail`` records of each partition of ``topic`` start."""
    consumer = Consumer(reader_conf(conf))
    try:
        return {p: max(low, high - tail) for p in range(partitions)
                for low, high in [offsets_range(consumer, TopicPartition(topic, p))]}
    finally:
        consumer.close()


def _plans_in(conf: dict[str, Any], topic: str, routes: set[str], key: bytes | None,
              starts: dict[int, int] | None
              ) -> tuple[dict[str, CutoverPlan], dict[str, str]]:
    """The newest good plan per route in the status messages of ``topic`` from ``starts``
    (all of it when None), and the workers whose messages this version cannot read."""
    best: dict[str, CutoverPlan] = {}
    unreadable: dict[str, str] = {}  # worker -> why (a newer worker's status, usually)
    for msg in read_to_end(conf, topic, starts):
        value = msg.value()
        if msg.key() is None or value is None:
            continue
        status = read_status(value)
        if status is None:
            continue
        if isinstance(status, UnreadableStatus):
            if status.route in routes:
                unreadable[status.worker] = status.reason
            continue
        plan = status.plan
        if plan is None or plan.route not in routes:
            continue
        if key is not None:
            try:
                parse_plan(plan.to_json(), route=plan.route, key=key)
            except PlanRejected:
                continue
        held = best.get(plan.route)
        if held is None or plan.epoch > held.epoch:
            best[plan.route] = plan
    return best, unreadable
