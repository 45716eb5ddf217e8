"""The CLI's state reader on the real broker: a bounded tail of the status topic when it holds
the current state, the whole topic when it does not, and incremental reads for `wait`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from cutover.control.routes import StateReader, Target
from cutover.plan import CutoverPlan, Segment
from cutover.status import PartitionStatus, RouteStatus, TransitionState
from router.base.kafka_io import base_conf

pytestmark = pytest.mark.broker

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PLAN = CutoverPlan(route="r", epoch=1, segments=(Segment(from_event_time=None,
                                                         primary="blue"),))


def _status(worker: str, parts: dict[int, int], i: int) -> bytes:
    st = RouteStatus(route="r", epoch=1, num_partitions=2, plan=PLAN, worker=worker,
                     partitions={p: PartitionStatus(epoch=1, horizon=h) for p, h in parts.items()},
                     updated_at=T0 + timedelta(seconds=i))
    return st.model_dump_json(by_alias=True).encode()


SWITCH = CutoverPlan(route="r", epoch=2, segments=(
    Segment(from_event_time=None, primary="blue"), Segment(from_event_time=100, primary="green")))


def _clear_status(worker: str, parts: list[int], i: int) -> bytes:
    """A status in which ``parts`` took the switch: both watermarks past its boundary."""
    wms = {"blue": 150, "green": 150}
    st = RouteStatus(route="r", epoch=2, num_partitions=2, plan=SWITCH, worker=worker,
                     partitions={p: PartitionStatus(epoch=2, boundary=100, watermarks=wms)
                                 for p in parts},
                     updated_at=T0 + timedelta(seconds=i))
    return st.model_dump_json(by_alias=True).encode()


def _setup(bootstrap: str, topic_factory: Callable[..., str]) -> tuple[Target, Producer]:
    status, control = topic_factory("status", 1), topic_factory("control", 1, True)
    return (Target(base_conf(bootstrap), control, status, {"r": 2}),
            Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}))


def test_tail_suffices_or_falls_back_to_a_full_read(bootstrap: str,
                                                    topic_factory: Callable[..., str]) -> None:
    t, prod = _setup(bootstrap, topic_factory)
    # One batch per record, as workers publish: the test broker's ListOffsets(LATEST) is
    # the last batch's base + 1, so a tail start from it is exact only then (and earlier,
    # never later, otherwise).
    prod.produce(t.status_topic, _status("a", {1: 111}, 0), b"r")   # only in the old part
    prod.flush(10)
    for i in range(1, 60):
        prod.produce(t.status_topic, _status("b", {0: 1000 + i}, i), b"r")
        prod.flush(10)
    with StateReader(t, "r", status_tail=10, control_tail=10) as reader:
        v = reader.refresh()["r"]
        assert reader.full, "partition 1 is not in the tail: the whole topic must be read"
    assert {p: ps.horizon for p, (ps, *_r) in v.partitions.items()} == {0: 1059, 1: 111}
    prod.produce(t.status_topic, _status("c", {0: 2000, 1: 2001}, 100), b"r")
    prod.flush(10)
    with StateReader(t, "r", status_tail=10, control_tail=10) as reader:
        v = reader.refresh()["r"]
        assert not reader.full
        assert set(reader.state["r"].workers) <= {"b", "c"}   # the tail only
    assert {p: ps.horizon for p, (ps, *_r) in v.partitions.items()} == {0: 2000, 1: 2001}
    assert v.plan == PLAN


def test_an_open_reader_sees_new_status_incrementally(bootstrap: str,
                                                      topic_factory: Callable[..., str]) -> None:
    t, prod = _setup(bootstrap, topic_factory)
    prod.produce(t.status_topic, _status("a", {0: 1, 1: 1}, 0), b"r")
    prod.flush(10)
    with StateReader(t, "r") as reader:
        assert reader.refresh()["r"].max_horizon() == 1
        assert reader.refresh()["r"].max_horizon() == 1
        prod.produce(t.status_topic, _status("a", {0: 5, 1: 7}, 1), b"r")
        prod.flush(10)
        assert reader.refresh()["r"].max_horizon() == 7


def test_a_status_this_version_cannot_read_is_named_not_dropped(
        bootstrap: str, topic_factory: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """A worker newer than the CLI writes a status field the CLI does not know (status
    messages are strict). The CLI keeps the worker's last readable status, names the worker
    and the field, and says to upgrade; a readable status from it clears the warning."""
    from cutover.cli import main as cutover_main

    t, prod = _setup(bootstrap, topic_factory)
    prod.produce(t.control_topic, PLAN.to_json(), b"r")
    prod.produce(t.status_topic, _status("a", {0: 10, 1: 11}, 0), b"r")
    newer = json.loads(_status("a", {0: 20, 1: 21}, 1))
    newer["partitions"]["0"]["lease_ms"] = 5000
    prod.produce(t.status_topic, json.dumps(newer).encode(), b"r")
    prod.produce(t.status_topic, json.dumps({"event": "lease", "route": "r", "worker": "z"})
                 .encode(), b"r")
    prod.produce(t.status_topic, b"not json", b"r")   # not a status at all: skipped, as before
    prod.flush(10)
    with StateReader(t, "r") as reader:
        v = reader.refresh()["r"]
        assert v.unreadable == {
            "a": "field 'partitions.0.lease_ms' is not known to this version of cutover",
            "z": "event 'lease' is not known to this version of cutover"}
        assert v.max_horizon() == 11   # a's last readable status, not the one it cannot read
        args = ["status", "--bootstrap", bootstrap, "--control-topic", t.control_topic,
                "--status-topic", t.status_topic, "--route", "r"]
        assert cutover_main(args) == 0
        out = capsys.readouterr().out
        assert "warning: cannot read the newest status of 2 worker(s) (a: field " \
               "'partitions.0.lease_ms' is not known" in out
        assert "upgrade it to the workers' version" in out
        assert cutover_main([*args, "--json"]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["r"]["unreadable_status"]["z"].startswith("event 'lease'")
        assert "route r: warning: cannot read the newest status" in captured.err
        prod.produce(t.status_topic, _status("a", {0: 30, 1: 31}, 2), b"r")
        prod.flush(10)
        v = reader.refresh()["r"]
        assert set(v.unreadable) == {"z"} and v.max_horizon() == 31


def test_a_partition_between_owners_keeps_its_last_report(
        bootstrap: str, topic_factory: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """In a rebalance every worker releases its partitions and publishes a status that lists
    none until the group assigns them again (seconds on Apache Kafka). A route that was clear
    to tear down stays clear meanwhile: each partition keeps the newest report of it in any
    message, not only in each worker's newest message (``cutover wait`` used to read PENDING,
    "no router has applied epoch 2 here yet", for the length of the rebalance)."""
    t, prod = _setup(bootstrap, topic_factory)
    prod.produce(t.control_topic, SWITCH.to_json(), b"r")
    prod.produce(t.status_topic, _clear_status("a", [0, 1], 0), b"r")
    prod.produce(t.status_topic, _clear_status("a", [], 1), b"r")   # released
    prod.produce(t.status_topic, _clear_status("b", [], 2), b"r")   # joined, nothing yet
    prod.flush(10)
    with StateReader(t, "r") as reader:
        v = reader.refresh()["r"]
        assert v.transition().state is TransitionState.CLEAR_TO_TEARDOWN
        assert {p: w for p, (_, _, w, _) in v.partitions.items()} == {0: "a", 1: "a"}
        assert v.between_owners() == {0, 1}
        # b takes partition 1 and has not applied the switch yet: its report is the newer.
        late = json.loads(_clear_status("b", [1], 3))
        late["partitions"]["1"].update(epoch=1, boundary=None)
        prod.produce(t.status_topic, json.dumps(late).encode(), b"r")
        prod.flush(10)
        v = reader.refresh()["r"]
        assert {p: w for p, (_, _, w, _) in v.partitions.items()} == {0: "a", 1: "b"}
        assert v.between_owners() == {0}
        assert [(h.partition, h.why) for h in v.transition().holdups] == [
            (1, "no router has applied epoch 2 here yet")]
    from cutover.cli import main as cutover_main

    args = ["status", "--bootstrap", bootstrap, "--control-topic", t.control_topic,
            "--status-topic", t.status_topic, "--route", "r"]
    assert cutover_main(args) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()
            if line.strip()[:1].isdigit()}
    assert "between owners: last report" in rows["0"] and "between owners" not in rows["1"]
    assert cutover_main([*args, "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["r"]["partitions"]
    assert (parts["0"]["between_owners"], parts["1"]["between_owners"]) == (True, False)
