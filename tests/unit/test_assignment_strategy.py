"""How the router's group assigns raw partitions (router.base.kafka_io.assignment_strategy)."""

from __future__ import annotations

from typing import Any

from cutover.settings import RouterSettings
from router.base.kafka_io import COOPERATIVE, data_consumer_conf


def settings(*inputs: list[str], kafka: dict[str, Any] | None = None) -> RouterSettings:
    return RouterSettings.model_validate({
        "bootstrap": "k:9092", "kafka": kafka or {},
        "routes": [{"name": f"r{i}", "inputs": ins, "output": f"r{i}.out"}
                   for i, ins in enumerate(inputs)]})


def strategy(s: RouterSettings) -> Any:
    return data_consumer_conf(s, None)["partition.assignment.strategy"]


def test_routes_of_one_raw_topic_each_rebalance_incrementally() -> None:
    assert strategy(settings(["a.raw"], ["b.raw"])) == COOPERATIVE


def test_a_route_with_a_topic_per_version_keeps_its_partitions_together() -> None:
    """Partition p of each input must stay with one worker: only range guarantees it."""
    assert strategy(settings(["a.raw"], ["b.blue", "b.green"])) == "range"
    assert strategy(settings(["b.blue", "b.green"], kafka={
        "partition.assignment.strategy": COOPERATIVE})) == "range"


def test_the_operator_may_keep_the_eager_range_assignment() -> None:
    """e.g. to join a group whose workers still use it: a group cannot mix the two."""
    assert strategy(settings(["a.raw"], kafka={"partition.assignment.strategy": "range"})) \
        == "range"
    assert strategy(settings(["a.raw"], kafka={"partition.assignment.strategy": "roundrobin"})) \
        == COOPERATIVE
