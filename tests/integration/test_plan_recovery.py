"""A restarted worker recovers each route's last good plan from the status topic
(router.worker.control.recover_plans) by reading the topic's tail, and all of it only when a route's
plan is not there: start-up does not grow with the status topic's history."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from cutover.plan import CutoverPlan, Segment
from cutover.settings import RouterSettings
from cutover.status import RouteStatus
from router.base.kafka_io import base_conf
from router.worker import control

pytestmark = pytest.mark.broker


def _plan(route: str, epoch: int) -> CutoverPlan:
    return CutoverPlan(route=route, epoch=epoch,
                       segments=(Segment(from_event_time=None, primary="blue"),
                                 Segment(from_event_time=1_767_225_600_000 + epoch,
                                         primary="green")))


def _settings(bootstrap: str, status: str, routes: list[str]) -> RouterSettings:
    return RouterSettings.model_validate({
        "bootstrap": bootstrap, "status_topic": status,
        "routes": [{"name": r, "inputs": [f"{r}.raw"], "output": f"{r}.out"} for r in routes]})


def test_plans_are_recovered_from_the_tail_or_from_the_whole_topic(
        bootstrap: str, topic_factory: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "STATUS_TAIL", 50)
    status = topic_factory("status", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})

    def publish(route: str, epoch: int) -> None:
        msg = RouteStatus(route=route, epoch=epoch, plan=_plan(route, epoch), worker="w")
        producer.produce(status, msg.model_dump_json().encode(), route.encode())

    publish("quiet", 4)              # a route whose workers stopped publishing long ago
    for epoch in range(1, 200):      # a busy route: its newest plan is in the tail
        publish("busy", min(epoch, 7))
    assert producer.flush(10) == 0

    reads: list[dict[int, int] | None] = []
    read_to_end = control.read_to_end

    def recorded(conf: dict[str, Any], topic: str, starts: dict[int, int] | None = None,
                 **kw: Any) -> Iterator[Message]:
        reads.append(starts)
        return read_to_end(conf, topic, starts, **kw)

    monkeypatch.setattr(control, "read_to_end", recorded)
    got = {p.route: p.epoch for p in control.recover_plans(
        base_conf(bootstrap), _settings(bootstrap, status, ["busy"]), None)}
    assert got == {"busy": 7}
    assert reads == [{0: 200 - 50}], "the busy route's plan is read from the tail alone"
    got = {p.route: p.epoch for p in control.recover_plans(
        base_conf(bootstrap), _settings(bootstrap, status, ["busy", "quiet"]), None)}
    assert got == {"busy": 7, "quiet": 4}
