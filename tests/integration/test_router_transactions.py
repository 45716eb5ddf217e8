"""Each step of a batch's transaction fails once, on Apache Kafka: before anything of the batch
is sent, after every record of it is delivered and before the commit, a commit that times out,
and a commit that fails. An aborted batch is replayed from its checkpoint, a timed-out commit
is asked again; the output and the dead-letter topic, read with read_committed, hold every
record exactly once, and the worker never restarts. The seams are ``CUTOVER_FAILPOINT``
(router.base.failpoints)."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.settings import RouterSettings
from cutover.topic_admin import create_topics
from router.base.errors import BatchAborted
from router.base.kafka_io import base_conf, read_to_end
from router.durability.transactions import Slot, WorkerTransactions
from testground.brokers import BrokerUnderTest
from tests.integration.harness import (
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
    produce_raw,
    run_cli_json,
)

pytestmark = pytest.mark.broker

N = 3000
POISON = [b"poison-0", b"poison-1"]


def _keys(env: Env, topic: str, isolation: str) -> Counter[bytes | None]:
    conf = {**base_conf(env.bootstrap), "isolation.level": isolation}
    return Counter(m.key() for m in read_to_end(conf, topic))


@pytest.mark.parametrize("step, handled", [
    ("txn-before-send", "batch aborted before its commit (failpoint txn-before-send)"),
    ("txn-after-send", "failpoint txn-after-send; the batch was aborted"),
    ("txn-commit-timeout", "commit did not complete"),
    # The commit completes (here: fails) while the worker consumes the next batch: the records
    # it consumed of the aborted partition are dropped and read again from its checkpoint.
    ("txn-commit-fails", "commit failed (failpoint txn-commit-fails)"),
])
def test_a_failed_transaction_step_loses_and_doubles_nothing(
        broker: BrokerUnderTest, tmp_path: Path, step: str, handled: str) -> None:
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu (auto): its read_committed shows aborted "
                    "records")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    router = RouterProcess(env, extra_env={"CUTOVER_FAILPOINT": step})
    try:
        router.wait_started()
        # Records without the tagger's headers go to the dead-letter topic: they are in the
        # first batch, the one the failpoint hits.
        for i, key in enumerate(POISON):
            produce_raw(env, key, b"{}", [("bg.version", b"blue")], partition=i)
        blue = Job(env, "blue")
        for lo in range(0, N, 500):
            blue.emit(events(lo, lo + 500))
        env.wait_output(N)
        check_output(env, events(0, N), lambda p, t: "blue")
        assert _keys(env, env.dlq, "read_committed") == Counter(POISON)
        text = router.text()
        assert f"failpoint {step}" in text, text[-3000:]
        assert handled in text, text[-3000:]
        if step != "txn-commit-timeout":
            assert "batch aborted; replaying from their checkpoints" in text, text[-3000:]
        router.assert_alive()
        assert text.count("took over partitions") == 1, \
            f"the worker restarted or rejoined: {text[-3000:]}"
        if step == "txn-after-send":
            # The aborted partition's batch was delivered: its copy of the dead letter it held
            # is in the log, and only a read_uncommitted reader sees it.
            seen = _keys(env, env.dlq, "read_uncommitted")
            assert set(seen) == set(POISON) and sum(seen.values()) > len(POISON), seen
    finally:
        router.stop()


@contextlib.contextmanager
def blue_through_a_failing_commit(broker: BrokerUnderTest, tmp_path: Path, failpoints: str
                                  ) -> Iterator[tuple[Env, RouterProcess]]:
    """One partition; blue emits 500 records, then ``failpoints`` are armed and blue emits
    the rest of ``N`` without pause while a commit fails; yields once all ``N`` are in the
    output."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    env = Env(broker.bootstrap, tmp_path, partitions=1)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    arm = tmp_path / "arm"
    router = RouterProcess(env, extra_env={"CUTOVER_FAILPOINT": failpoints,
                                           "CUTOVER_FAILPOINT_ARM": str(arm)})
    try:
        router.wait_started()
        blue = Job(env, "blue")
        blue.emit(events(0, 500))
        env.wait_output(500)
        arm.touch()
        for lo in range(500, N, 100):
            blue.emit(events(lo, lo + 100))
            time.sleep(0.02)
        env.wait_output(N)
        yield env, router
    finally:
        router.stop()


def test_a_batch_whose_commit_fails_leaves_no_identity_in_the_store_for_its_replay(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """The worker purges old identities from its stores now and then, here at every batch
    (``purge-every-batch``), while a batch's commit is in flight for seconds and then fails
    (``txn-commit-fails-slowly``). The purge must not write that batch's identities to the
    store: the partition is taken over again from its checkpoint with its store kept, and a
    replay that found them there would suppress its own records as duplicates of output that
    was aborted. Every record is in the output once."""
    with blue_through_a_failing_commit(broker, tmp_path,
                                       "txn-commit-fails-slowly,purge-every-batch") as (env,
                                                                                       router):
        check_output(env, events(0, N), lambda p, t: "blue")
        text = router.text()
        assert "commit failed (failpoint txn-commit-fails-slowly)" in text, text[-3000:]
        assert "kept store" in text, text[-3000:]   # the replay trusted the store it had
        router.assert_alive()


@pytest.mark.parametrize("failpoint", ["txn-commit-fails", "txn-commit-fails-slowly"])
def test_records_consumed_while_a_commit_fails_are_read_again(
        broker: BrokerUnderTest, tmp_path: Path, failpoint: str) -> None:
    """A batch's commit completes while the worker consumes the next batch
    (router.durability.batch_end). When it fails, the partition is taken over again from its
    checkpoint, and the records already consumed of it are dropped and read again from there: every
    record is in the output once, in order. The job emits without pause while the commit fails (it
    takes half a second, or, slowly, long enough that the partition is set aside and paused
    meanwhile), so the consume in between has records of the partition."""
    with blue_through_a_failing_commit(broker, tmp_path, failpoint) as (env, router):
        out = check_output(env, events(0, N), lambda p, t: "blue")
        times = [int(dict(m.headers())["bg.event_time"]) for m in out]
        assert times == sorted(times), "the output is not in the raw partition's order"
        text = router.text()
        assert f"commit failed (failpoint {failpoint})" in text, text[-3000:]
        dropped = re.findall(r"(\d+) consumed records dropped", text)
        assert dropped and int(dropped[0]) > 0, text[-3000:]
        reread = sum(int(n) for n in dropped)  # the status counts them on their partition
        env.wait_for(f"the status counting {reread} records read again",
                     lambda: run_cli_json(env)["counters"]["reread"] == reread)
        router.assert_alive()
        assert text.count("took over partitions") == 1, "the worker restarted or rejoined"


def test_a_crash_after_a_commit_repeats_no_dead_letter(broker: BrokerUnderTest,
                                                      tmp_path: Path) -> None:
    """A batch's dead letters commit with its checkpoint, which resumes past them: a worker
    that dies right after the commit, before any later checkpoint, leaves nothing for its
    successor to decide again (nothing reads the dead-letter topic back, so a record decided
    again there would be written twice)."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu (auto): its read_committed shows aborted "
                    "records")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    for i, key in enumerate(POISON):
        produce_raw(env, key, b"{}", [("bg.version", b"blue")], partition=i)
    Job(env, "blue").emit(events(0, N))
    # Fires at the first commit of a partition whose batch had output records: that batch
    # began at the partition's first record, its dead letter.
    crashing = RouterProcess(env, name="a", extra_env={"CUTOVER_FAILPOINT": "exit-after-commit"})
    try:
        env.wait_for("the worker to die at the failpoint",
                     lambda: crashing.proc.poll() is not None, 90, 0.2)
        assert "failpoint exit-after-commit" in crashing.text(), crashing.text()[-3000:]
        assert sum(_keys(env, env.dlq, "read_committed").values()) >= 1, \
            "no dead letter committed before the failpoint"
    finally:
        crashing.stop()
    router = RouterProcess(env, name="b")
    try:
        router.wait_started()
        env.wait_output(N)
        check_output(env, events(0, N), lambda p, t: "blue")
        dead = list(read_to_end({**base_conf(env.bootstrap),
                                 "isolation.level": "read_committed"}, env.dlq))
        assert Counter(m.key() for m in dead) == Counter(POISON)
        srcs = [dict(m.headers() or ())["bg.src"].decode() for m in dead]
        assert len(srcs) == 2 and all(re.fullmatch(r"[^:]+:[01]:0", s) for s in srcs), srcs
        router.assert_alive()
    finally:
        router.stop()


@dataclass
class StalledCommit:
    env: Env
    router: RouterProcess
    at: float   # time.monotonic() when the stall began


@contextlib.contextmanager
def a_stalled_commit(broker: BrokerUnderTest, tmp_path: Path,
                     commit_stuck_s: float) -> Iterator[StalledCommit]:
    """Two partitions, blue the primary: 200 records routed, then one partition's commit of
    the next 200 waits ten seconds before it is sent (failpoint ``txn-commit-stalls``: its
    transaction coordinator does not answer), then 200 more written."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    arm = tmp_path / "arm"
    router = RouterProcess(env, config=env.write_config(commit_stuck_s=commit_stuck_s),
                           extra_env={"CUTOVER_FAILPOINT": "txn-commit-stalls",
                                      "CUTOVER_FAILPOINT_ARM": str(arm)})
    try:
        router.wait_started()
        blue = Job(env, "blue")
        blue.emit(events(0, 200))
        env.wait_output(200)
        arm.touch()
        blue.emit(events(200, 400))       # one partition's commit of these stalls
        env.wait_for("the stall", lambda: "failpoint txn-commit-stalls" in router.text(), 10)
        stalled_at = time.monotonic()
        blue.emit(events(400, 600))
        yield StalledCommit(env, router, stalled_at)
    finally:
        router.stop()


def assert_once_in_order(env: Env, n: int) -> None:
    out = check_output(env, events(0, n), lambda p, t: "blue")
    for p in range(2):
        times = [int(dict(m.headers())["bg.event_time"]) for m in out if m.partition() == p]
        assert times == sorted(times), f"partition {p} is out of order"


def test_a_commit_that_does_not_settle_sets_its_partitions_aside_without_a_rejoin(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """A commit waits ten seconds: the partitions of its producer (on one broker, every one)
    are set aside while it is in flight, and the worker keeps consuming; once the commit
    settles, the set-aside partitions' records are read again and every record is in the
    output once, in order, without a rejoin. That a commit holds only its own producer's
    partitions, the others going on, is tests/unit/test_slot_binding.py's and the frozen
    broker cells' (tests/conformance)."""
    # the stalled commit settles by itself here, before it would be given up as stuck
    with a_stalled_commit(broker, tmp_path, commit_stuck_s=60) as stall:
        env, router = stall.env, stall.router
        env.wait_output(600, timeout=60)
        assert_once_in_order(env, 600)
        assert "set aside" in router.text(), router.tail(40)
        router.assert_alive()
        assert router.text().count("took over partitions") == 1, "the worker rejoined"


def test_a_stuck_commit_is_given_up_and_its_partition_replayed_by_a_new_producer(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """One partition's commit waits ten seconds; past ``commit_stuck_s`` it is given up: the
    partition's new producer aborts the stuck transaction and fences the old producer, and
    the partition is replayed from its checkpoint, so its output comes back before the
    stalled commit would have returned. When the old producer's commit is finally sent it is
    refused (fenced): every record is in the output once, in order, and the worker did not
    rejoin its group."""
    with a_stalled_commit(broker, tmp_path, commit_stuck_s=2) as stall:
        env, router = stall.env, stall.router
        env.wait_output(600, timeout=30)
        # before the stalled commit was even sent (COMMIT_STALL_S after the stall began)
        assert time.monotonic() - stall.at < 9, "the stuck partition waited for its commit"
        assert "given up: a new producer aborts it" in router.text(), router.tail(40)
        assert_once_in_order(env, 600)
        time.sleep(10)   # the old producer's commit is sent now, and refused
        assert len(env.read(env.output)) == 600
        router.assert_alive()
        assert router.text().count("took over partitions") == 1, "the worker rejoined"


def test_a_partition_set_aside_again_and_again_loses_and_doubles_nothing(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """Every commit of partition 0 takes longer than the data path waits for it, so partition 0
    is set aside, paused and resumed at almost every batch while both partitions take records
    without pause: every record is in the output once, in its partition's order."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    router = RouterProcess(env, extra_env={"CUTOVER_FAILPOINT": "txn-commits-slow"})
    try:
        router.wait_started()
        blue = Job(env, "blue")
        n = 3000
        for lo in range(0, n, 50):
            blue.emit(events(lo, lo + 50))
            time.sleep(0.05)
        env.wait_output(n, timeout=120)
        out = check_output(env, events(0, n), lambda p, t: "blue")
        for p in range(2):
            times = [int(dict(m.headers())["bg.event_time"]) for m in out if m.partition() == p]
            assert times == sorted(times), f"partition {p} is out of order"
        assert router.text().count("set aside") >= 3, router.tail(40)
        router.assert_alive()
    finally:
        router.stop()


def _join(bootstrap: str, group: str, topic: str, members: list[Consumer]) -> Consumer:
    """A new member of ``group``; the members (``members`` and it) polled together until the
    two partitions of ``topic`` are shared among them, one rebalance later."""
    c = Consumer({**base_conf(bootstrap), "group.id": group, "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    everyone = [*members, c]
    deadline = time.monotonic() + 30
    while not all(len(m.assignment()) == 2 // len(everyone) for m in everyone):
        assert time.monotonic() < deadline, "no assignment within 30 s"
        for m in everyone:
            m.poll(0.1)
    return c


def test_offsets_refused_for_a_past_generation_abort_the_batch_without_fencing_the_producer(
        broker: BrokerUnderTest) -> None:
    """A rebalance moves the group's generation under a commit in flight: the coordinator
    refuses its offsets (ILLEGAL_GENERATION, KIP-447). The batch aborts and is replayed; the
    producer is not fenced, so the worker does not give up every partition and rejoin. Its next
    transaction, with the group metadata of the new generation, commits."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    bootstrap, tag = broker.bootstrap, uuid.uuid4().hex[:8]
    raw, out, group = f"refused-raw-{tag}", f"refused-out-{tag}", f"refused-{tag}"
    create_topics(bootstrap, {raw: 2, out: 2})
    first = _join(bootstrap, group, raw, [])
    stale = first.consumer_group_metadata()
    second = _join(bootstrap, group, raw, [first])   # a rebalance: a new generation
    settings = RouterSettings.model_validate({
        "bootstrap": bootstrap, "group_id": group,
        "routes": [{"name": "r", "inputs": [raw], "output": out}]})
    txn = WorkerTransactions(settings, {}, "w1")
    producer = Producer({**base_conf(bootstrap), "transactional.id": f"{group}.w1.1"})
    producer.init_transactions(30)
    slot = Slot(1, producer)
    mine = first.assignment()[0].partition
    offsets = [TopicPartition(raw, mine, 1)]
    try:
        producer.begin_transaction()
        producer.produce(out, b"aborted", partition=mine)
        refused = txn.commit(slot, [("r", mine)], None, {}, offsets, lambda: stale, 30)
        assert isinstance(refused, BatchAborted), refused
        assert "ILLEGAL_GENERATION" in str(refused), refused
        producer.begin_transaction()              # not fenced: the next batch goes on
        producer.produce(out, b"committed", partition=mine)
        fresh = first.consumer_group_metadata()
        assert txn.commit(slot, [("r", mine)], None, {}, offsets, lambda: fresh, 30) is None
        conf = {**base_conf(bootstrap), "isolation.level": "read_committed"}
        assert [m.value() for m in read_to_end(conf, out)] == [b"committed"]
    finally:
        producer.flush(5)
        first.close()
        second.close()
