"""kill -9 of the example jobs of the other shapes mid-batch, then a restart on the checkpoint:
update output mode (``running_totals.py``), a stream-stream join (``paid_orders.py``), a
plain Kafka sink on Spark Connect (``windowed_totals_connect.py``) and three queries in one job
(``orders_with_audit.py``: two Kafka sinks and a ``foreachBatch`` writer, each to its topic).

Each job runs twice on the same input: once straight through (the reference), once killed
while a batch has written data but not yet its heartbeats and then restarted with
``--available-now``. The killed run's records, copies removed, are the reference's (key,
value, event time), topic by topic; every copy is byte-identical to its original (headers
included), and on the watched topic belongs to the killed batch; every committed batch's
heartbeats reach every partition of its query's topic. Both runs read
at most 40 input records a batch and 64 shuffle partitions, so a batch's write lasts long enough
to be caught in the middle.

Two queries of one job writing one topic (``tests/spark/jobs/shared_topic.py``) have a test of
their own: their batch ids overlap on the topic and heartbeats do not say which query sent
them, so copies are checked query by query (told apart by their values) and heartbeats batch id
by batch id, as many as the queries that committed it.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from spark_test_support import (
    CONNECT_LOCAL_ENV,
    JOBS,
    TEST_JOBS,
    Meaning,
    OutputWatcher,
    TagRun,
    check_heartbeats,
    check_replay,
    committed_batches,
    kill_mid_batch,
    meaning,
    offset_logs,
    run_tag,
    tag_command,
    wait_for,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import EVENT_TIME, KIND, parse_headers
from spark_tagger.partitioner import partition_for
from spark_tagger.spark_version import has_python_data_sources
from testground.brokers import create_topics
from tests.topics import RawRecord, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

OUT = 3
SLOW_TASKS = ["--conf", "spark.sql.shuffle.partitions=64"]
SPEC = EventSpec(seed=67, count=320, customers=6, step_ms=250, max_disorder_ms=1_000,
                 closing_gap_ms=60_000)


def _inputs(bootstrap: str, shape: str, n: str) -> list[str]:
    """The job's input arguments, topics created and filled."""
    orders = f"ks-o-{shape}-{n}"
    create_topics(bootstrap, {orders: 2})
    made = make_orders(SPEC)
    write_orders(bootstrap, orders, made)
    if shape != "stream-join":
        return ["--input", orders]
    payments = f"ks-p-{n}"
    create_topics(bootstrap, {payments: 2})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, o in sorted(enumerate(made), key=lambda x: x[1].ts):
        if i % 4:
            key = o.order_id.encode()
            producer.produce(payments, key=key, partition=partition_for(key, None, 2),
                             value=json.dumps({"order_id": o.order_id,
                                               "paid_ts": o.ts + (i * 7919) % 20_000}))
    assert producer.flush(30) == 0
    return ["--orders", orders, "--payments", payments]


# job, tagger flags, environment, outputs: (flag, the query's checkpoint under --checkpoint);
# the first output is the one watched for a batch in progress
ONE = (("--output", ""),)
SHAPES = {
    "update-mode": ("running_totals.py", [], {}, ONE),
    "stream-join": ("paid_orders.py", ["--event-time", "greatest(order_time, paid_time)"], {},
                    ONE),
    "spark-connect": ("windowed_totals_connect.py", [], CONNECT_LOCAL_ENV, ONE),
    "several-queries": ("orders_with_audit.py", [], {},
                        (("--enriched", "enriched"), ("--totals", "totals"),
                         ("--audit", "audit"))),
}


@pytest.mark.parametrize("shape", [
    pytest.param(s, marks=pytest.mark.skipif(
        s == "spark-connect" and not has_python_data_sources(),
        reason="the tagger serves Spark Connect jobs from Spark 4 on; on 3.5 it refuses them "
               "(tests/spark/test_launcher_errors.py)")) for s in SHAPES])
def test_kill_9_mid_batch_then_restart_gives_the_straight_run_s_records(
    bootstrap: str, tmp_path: Path, shape: str
) -> None:
    job, flags, env, outputs = SHAPES[shape]
    n = uuid.uuid4().hex[:8]
    inputs = _inputs(bootstrap, shape, n)
    extra = ["--remote", "local[2]"] if shape == "spark-connect" else []
    ref = {flag: f"ks-ref-{shape}{flag}-{n}" for flag, _ in outputs}
    out = {flag: f"ks-out-{shape}{flag}-{n}" for flag, _ in outputs}
    create_topics(bootstrap, dict.fromkeys([*ref.values(), *out.values()], OUT))

    def args(topics: dict[str, str], ck: Path) -> list[str]:
        named = [w for flag, topic in topics.items() for w in (flag, topic)]
        return ["--bootstrap", bootstrap, *inputs, *named, "--checkpoint", str(ck),
                "--max-offsets-per-trigger", "40", *extra]

    run_tag(tag_command("blue", JOBS / job, [*args(ref, tmp_path / "ref"), "--available-now"],
                        [*flags, *SLOW_TASKS]), tmp_path / "ref.log", timeout=600, env=env)
    ck = tmp_path / "ck"
    watched, watched_ck = outputs[0][0], ck / outputs[0][1]
    first = TagRun(tag_command("blue", JOBS / job, args(out, ck), [*flags, *SLOW_TASKS]),
                   tmp_path / "first.log", env).start()
    killed_in = kill_mid_batch(first, OutputWatcher(bootstrap, out[watched], OUT), watched_ck)
    run_tag(tag_command("blue", JOBS / job, [*args(out, ck), "--available-now"],
                        [*flags, *SLOW_TASKS]), tmp_path / "second.log", timeout=600, env=env)
    for flag, sub in outputs:
        check_replay(read_topic(bootstrap, ref[flag]), read_topic(bootstrap, out[flag]),
                     committed_batches(ck / sub), OUT, killed_in if flag == watched else None)


def _query_of(value: bytes | None) -> str:
    """Which query of ``shared_topic.py`` wrote a record: ``orders`` copies carry the order."""
    return "orders" if b'"order_id"' in (value or b"") else "totals"


def test_kill_9_mid_batch_of_two_queries_sharing_a_topic_then_restart(
    bootstrap: str, tmp_path: Path
) -> None:
    """``shared_topic.py``: two queries, one output topic, overlapping batch ids. Killed while a
    batch of one query has written records but not its heartbeats (no heartbeat of that batch
    id beyond what the other query's commit accounts for) and is not committed; restarted. Each
    query's copies are byte-identical and belong to the batch that query had not committed at
    the kill; every batch id committed by either query has heartbeats on every partition, as
    many as the queries that committed it."""
    n = uuid.uuid4().hex[:8]
    tin, ref, out = f"ks-o-shared-{n}", f"ks-ref-shared-{n}", f"ks-out-shared-{n}"
    create_topics(bootstrap, {tin: 2})
    write_orders(bootstrap, tin, make_orders(SPEC))
    create_topics(bootstrap, {ref: OUT, out: OUT})
    job = TEST_JOBS / "shared_topic.py"
    queries = ("orders", "totals")

    def args(topic: str, ck: Path, trigger: str) -> list[str]:
        return [bootstrap, tin, topic, str(ck), "40", trigger]

    run_tag(tag_command("blue", job, args(ref, tmp_path / "ref", "available-now"), SLOW_TASKS),
            tmp_path / "ref.log", timeout=600)
    ck = tmp_path / "ck"
    first = TagRun(tag_command("blue", job, args(out, ck, "continuous"), SLOW_TASKS),
                   tmp_path / "first.log").start()
    watcher = OutputWatcher(bootstrap, out, OUT, label=_query_of)
    try:

        def running() -> tuple[str, int] | None:
            assert first.proc.poll() is None, f"the job ended early:\n{first.tail()}"
            watcher.poll()
            done = {q: committed_batches(ck / q) for q in queries}
            for q, other in zip(queries, reversed(queries), strict=True):
                for b in sorted(watcher.data_by_query[q] - done[q]):
                    others = int(b in done[other])  # the other query's heartbeats of b
                    if b >= 1 and all(watcher.beats[(b, p)] <= others for p in range(OUT)):
                        return q, b
            return None

        killed_q, killed_in = wait_for(running, 400, "a batch in progress", interval=0.02)
        first.kill()
    finally:
        if first.proc.poll() is None:
            first.kill()
        watcher.consumer.close()
    # per query, the batches planned (offsets written) and not committed when the job died
    open_at_kill = {q: {log.batch for log in offset_logs(ck / q, tin)} - committed_batches(ck / q)
                    for q in queries}
    assert killed_in in open_at_kill[killed_q], "not mid-batch"
    run_tag(tag_command("blue", job, args(out, ck, "available-now"), SLOW_TASKS),
            tmp_path / "second.log", timeout=600)

    reference, after = read_topic(bootstrap, ref), read_topic(bootstrap, out)
    assert set(meaning(after)) == set(meaning(reference)), "records lost or invented"
    assert all(n == 1 for n in meaning(reference).values())
    for q in queries:
        copies: dict[Meaning, list[RawRecord]] = defaultdict(list)
        for r in after:
            if not r.header(KIND) and _query_of(r.value) == q:
                copies[(r.key, r.value, r.header(EVENT_TIME) or "")].append(r)
        assert copies, f"{q} wrote nothing"
        doubled = [rs for rs in copies.values() if len(rs) > 1]
        for rs in doubled:
            assert len(rs) == 2 and len({r.content for r in rs}) == 1, f"a {q} copy differs"
        batches = {parse_headers(list(rs[0].headers)).batch for rs in doubled}
        assert batches <= open_at_kill[q], (q, batches, open_at_kill[q])
        if q == killed_q:
            assert batches == {killed_in}, "the kill interrupted no batch that had written"
    senders = Counter(b for q in queries for b in committed_batches(ck / q))
    assert {b for q in queries for b in open_at_kill[q]} <= set(senders), "a batch not replayed"
    check_heartbeats(after, senders, OUT, senders)
