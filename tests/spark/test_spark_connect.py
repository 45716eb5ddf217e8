"""Jobs on Spark Connect under ``cutover tag``.

The windowed example with its session built by ``SparkSession.builder.remote("local[2]")``
(a Connect server started in the job's process, its queries run there, its foreachBatch in the
server's own Python workers): every record is checked against the input and the checkpoint as
on a classic driver (window end as event time, the batch that emitted it, that batch's
watermark, heartbeats on every partition). A job's own foreachBatch function writing with the
batch Kafka writer (run by the server's Python) and a batch Kafka write outside any query are
tagged too. What Connect cannot serve is refused at start with the sentence: two Kafka sinks on
one topic; a batch write without --event-time has no event time and is refused as on a classic
session. Tagged on Connect, the windowed example emits what it emits untagged on a classic
driver.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark import __version__ as pyspark_version
from spark_test_support import (
    CONNECT_LOCAL_ENV,
    JOBS,
    REPO,
    TEST_JOBS,
    TagRun,
    assign_batches,
    committed_batches,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    run_tag,
    spark_env,
    tag_command,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, parse_headers
from spark_tagger.partitioner import partition_for
from testground.brokers import create_topics
from tests.conformance.spark_slice import RAW_PARTITIONS, SPARK_CELLS, run_spark_cell
from tests.topics import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

WINDOW_MS, DELAY_MS, PARTITIONS = 10_000, 5_000, 5
SPEC = EventSpec(seed=81, count=240, customers=3, step_ms=250, max_disorder_ms=2_000,
                 closing_gap_ms=60_000)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.mark.slow  # about two minutes (a Connect server in the job): make test-all runs it
@pytest.mark.parametrize("job", ["windowed_totals_connect.py",
                                 "windowed_totals_foreach_batch.py"])
def test_windowed_job_on_spark_connect_is_tagged_like_on_a_classic_driver(
    bootstrap: str, tmp_path: Path, job: str
) -> None:
    n = uuid.uuid4().hex[:8]
    tin, out = f"connect-in-{n}", f"connect-out-{n}"
    create_topics(bootstrap, {tin: 2, out: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(SPEC))
    ck = tmp_path / "ck"
    run = run_tag(tag_command("blue", JOBS / job, [
        "--remote", "local[2]", "--bootstrap", bootstrap, "--input", tin, "--output", out,
        "--checkpoint", str(ck), "--available-now", "--max-offsets-per-trigger", "60"]),
        tmp_path / "job.log", timeout=600, env=CONNECT_LOCAL_ENV)
    assert "event time: end of window column 'window' (Spark Connect)" in run.text()
    orders = orders_by_position(read_topic(bootstrap, tin))
    logs = offset_logs(ck, tin)
    wms = expected_watermarks(logs, orders, DELAY_MS)
    assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
    assert len(logs) >= 3 and committed_batches(ck) == {log.batch for log in logs}
    batch_of = assign_batches(logs, orders)
    expected: dict[tuple[str, int], tuple[int, int]] = {}  # window -> (batch, orders)
    groups: dict[tuple[str, int], list[int]] = {}
    for pos, o in orders.items():
        start = o.ts - o.ts % WINDOW_MS
        if (wms[batch_of[pos]] or 0) < start + WINDOW_MS:
            groups.setdefault((o.customer, start), []).append(o.ts)
    for (customer, start), members in groups.items():
        emit = next((log.batch for log in logs if (wms[log.batch] or 0) >= start + WINDOW_MS),
                    None)
        if emit is not None:
            expected[(customer, start)] = (emit, len(members))
    records = read_topic(bootstrap, out)
    got: dict[tuple[str, int], tuple[int, int]] = {}
    for r in records:
        tagged = parse_headers(list(r.headers))
        assert tagged.version == "blue"
        if r.header(KIND):
            continue
        v = json.loads(r.value or b"", parse_float=Decimal)
        start = _ms(v["window_start"])
        assert (v["customer"], start) not in got, "duplicate"
        got[(v["customer"], start)] = (tagged.batch or 0, v["orders"])
        assert tagged.event_time == start + WINDOW_MS
        assert tagged.watermark == wms[tagged.batch or 0]
        assert r.partition == partition_for(r.key, None, PARTITIONS)
    assert got == expected and len(got) > 10
    beats = sorted((r.partition, int(r.header("bg.batch") or -1)) for r in records
                   if r.header(KIND))
    assert beats == sorted((p, b) for p in range(PARTITIONS) for b in wms)


def _connect_job(bootstrap: str, tmp_path: Path, shape: str, count: int = 20,
                 flags: tuple[str, ...] = ()) -> tuple[str, str, subprocess.CompletedProcess[str]]:
    n = uuid.uuid4().hex[:8]
    tin, out = f"connect-{shape}-in-{n}", f"connect-{shape}-out-{n}"
    create_topics(bootstrap, {tin: 2, out: 3})
    write_orders(bootstrap, tin, make_orders(EventSpec(count=count)))
    res = subprocess.run(tag_command("blue", TEST_JOBS / "connect_session.py",
                                     ["local[2]", bootstrap, tin, out, str(tmp_path / "ck"),
                                      shape], flags),
                         capture_output=True, text=True, timeout=600,
                         env={**spark_env(), **CONNECT_LOCAL_ENV},
                         cwd=REPO, stdin=subprocess.DEVNULL)
    return tin, out, res


def test_foreach_batch_on_spark_connect_is_tagged_on_the_server(
    bootstrap: str, tmp_path: Path
) -> None:
    """The job's foreachBatch function runs in the Connect server's Python and writes each
    batch with df.write.format('kafka'): every record is its input record, tagged with its
    input's timestamp (the watermark column) as event time, the batch that read it and that
    batch's watermark from the checkpoint; heartbeats to every partition after each batch."""
    tin, out, res = _connect_job(bootstrap, tmp_path, "foreach-batch", count=40)
    assert res.returncode == 0, res.stderr[-3000:]
    assert ("cutover tag: version blue -> the Kafka writes of query 'mirror''s foreachBatch "
            "function; event time: watermark column 'timestamp' (Spark Connect)") in res.stderr
    inputs = read_topic(bootstrap, tin)
    logs = offset_logs(tmp_path / "ck", tin)
    assert len(logs) >= 3 and committed_batches(tmp_path / "ck") == {g.batch for g in logs}
    wms = {g.batch: g.meta.batchWatermarkMs or None for g in logs}
    batch_of = assign_batches(logs, {(r.partition, r.offset): r for r in inputs})
    want = {(r.key, r.value): (r.timestamp, batch_of[(r.partition, r.offset)]) for r in inputs}
    records = read_topic(bootstrap, out)
    data = [r for r in records if not r.header(KIND)]
    assert sorted((r.key, r.value) for r in data) == sorted(want), "lost or doubled records"
    for r in data:
        tagged = parse_headers(list(r.headers))
        ts, batch = want[(r.key, r.value)]
        assert (tagged.version, tagged.event_time, tagged.batch) == ("blue", ts, batch)
        assert tagged.watermark == wms[batch]
    beats = sorted((r.partition, int(r.header("bg.batch") or -1)) for r in records
                   if r.header(KIND))
    assert beats == sorted((p, b) for p in range(3) for b in wms)


@pytest.mark.slow
def test_batch_write_on_spark_connect_is_tagged_with_the_event_time_given(
    bootstrap: str, tmp_path: Path
) -> None:
    _, out, res = _connect_job(bootstrap, tmp_path, "batch-write",
                               flags=("--event-time", "timestamp_millis(cast(value as bigint))"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "cutover tag: batch write of 1 records to" in res.stderr
    (record,) = read_topic(bootstrap, out)
    tagged = parse_headers(list(record.headers))
    assert (tagged.version, tagged.event_time, tagged.watermark) == ("blue", 1767225600000,
                                                                      None)


@pytest.mark.parametrize(("shape", "sentence"), [
    pytest.param("batch-write", "cutover tag: a batch Kafka write outside any streaming "
                 "query's foreachBatch has no watermark to take its records' event time "
                 "from; pass --event-time COLUMN|EXPR (a timestamp or epoch-ms column)",
                 marks=pytest.mark.slow),
    pytest.param("shared-topic", "cutover tag: the query writing to topic {out!r} writes to "
                 "topic {out!r}, which another query of the job writes too; on Spark Connect "
                 "each query's tagger runs in its own server-side process, so their heartbeats "
                 "cannot carry the lower of the two watermarks: give each query its own topic",
                 marks=pytest.mark.slow),
])
def test_what_connect_cannot_serve_is_refused_at_start(
    bootstrap: str, tmp_path: Path, shape: str, sentence: str
) -> None:
    _, out, res = _connect_job(bootstrap, tmp_path, shape)
    assert res.returncode == 2, res.stderr[-3000:]
    # the sentence is the launcher's last word (Spark's server, stopping, may log after it)
    assert sentence.format(out=out) in res.stderr.splitlines(), res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    # nothing untagged: the shared-topic job's first query started (tagged) before the refusal
    assert all(r.header("bg.version") == "blue" for r in read_topic(bootstrap, out))


@pytest.mark.slow
def test_connect_windows_blue_then_green_through_the_router_equal_the_reference(
    bootstrap: str, tmp_path: Path
) -> None:
    """The conformance grid's Spark Connect cell: both versions on Connect, side by side, a
    switch, blue torn down; the output against the reference computed from the input."""
    cell = next(c for c in SPARK_CELLS if c.job == "windowed_totals_connect")
    r = run_spark_cell(cell, bootstrap, tmp_path)
    detail = (f"expected={r.expected} forwarded={r.forwarded} lost={r.lost} "
              f"dup={r.duplicated} wrong={r.wrong_version} unexpected={r.unexpected} "
              f"order={r.order_violations} dlq={r.dead_lettered} clear={r.clear_s}s "
              f"boundary={r.boundary} pins={r.pins} ({r.duration_s}s) {r.notes}")
    assert r.passed, "; ".join(r.reasons) + "\n" + detail
    assert r.expected >= 40 and r.forwarded == r.expected and r.order_violations == 0, detail
    assert r.boundary is not None and len(r.pins) == RAW_PARTITIONS and r.clear_s is not None


def test_a_connect_job_whose_server_has_no_kafka_connector_stops_with_the_fix(
    bootstrap: str, tmp_path: Path
) -> None:
    """The Connect server (here the local one the job starts) has no Kafka connector: the job
    ends at start with one sentence naming the package to add, not a Python traceback."""
    n = uuid.uuid4().hex[:8]
    tin, out = f"connect-nocon-in-{n}", f"connect-nocon-out-{n}"
    create_topics(bootstrap, {tin: 2, out: 2})
    res = subprocess.run(tag_command("blue", JOBS / "windowed_totals_connect.py", [
        "--remote", "local[2]", "--bootstrap", bootstrap, "--input", tin, "--output", out,
        "--checkpoint", str(tmp_path / "ck"), "--available-now"]),
        capture_output=True, text=True, timeout=600, cwd=REPO, stdin=subprocess.DEVNULL,
        env={**spark_env(connector=False), **CONNECT_LOCAL_ENV})
    assert res.returncode == 2, res.stderr[-3000:]
    sentence = next((line for line in res.stderr.splitlines()
                     if line.startswith("cutover tag: the job reads or writes Kafka")), "")
    assert sentence.startswith("cutover tag: the job reads or writes Kafka but the Spark "
                               "Connect server has no Kafka connector"), res.stderr[-3000:]
    assert (f"--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:"
            f"{pyspark_version}") in sentence
    assert "Traceback" not in res.stderr
    assert read_topic(bootstrap, out) == []


@pytest.mark.slow  # a Connect server and a classic driver, one after the other: make test-all
def test_a_windowed_job_tagged_on_connect_emits_what_it_emits_untagged_on_classic_spark(
    bootstrap: str, tmp_path: Path
) -> None:
    """Tagging on Spark Connect never changes what a job emits: the windowed example tagged on
    a Connect server and the same query run untagged on a classic driver, on the same input with
    the same trigger (available-now, 60 records a batch), write the same records (key, value,
    partition), each window once; the tagged ones carry the window's end as event time."""
    n = uuid.uuid4().hex[:8]
    tin, tagged_out, plain_out = f"eq-in-{n}", f"eq-connect-{n}", f"eq-classic-{n}"
    create_topics(bootstrap, {tin: 2, tagged_out: PARTITIONS, plain_out: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(SPEC))
    same = ["--bootstrap", bootstrap, "--input", tin, "--available-now",
            "--max-offsets-per-trigger", "60"]
    run_tag(tag_command("blue", JOBS / "windowed_totals_connect.py", [
        "--remote", "local[2]", *same, "--output", tagged_out,
        "--checkpoint", str(tmp_path / "ck-connect")]),
        tmp_path / "connect.log", timeout=900, env=CONNECT_LOCAL_ENV)
    plain = TagRun([sys.executable, str(JOBS / "windowed_totals.py"), *same,
                    "--output", plain_out, "--checkpoint", str(tmp_path / "ck-classic")],
                   tmp_path / "classic.log").start()
    assert plain.wait(600) == 0, plain.tail()

    tagged = [r for r in read_topic(bootstrap, tagged_out) if not r.header(KIND)]
    untagged = read_topic(bootstrap, plain_out)
    assert all(not r.headers for r in untagged), "the classic run was tagged"
    content = lambda rs: Counter((r.key, r.value, r.partition) for r in rs)  # noqa: E731
    assert content(tagged) == content(untagged)
    assert len(untagged) > 10 and max(content(untagged).values()) == 1
    for r in tagged:
        assert parse_headers(list(r.headers)).event_time == _ms(
            json.loads(r.value or b"")["window_end"])
