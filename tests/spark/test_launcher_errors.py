"""``cutover tag`` refuses what it cannot do, at start, with a message and no traceback."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from pyspark import __version__ as pyspark_version
from spark_test_support import JOBS, REPO, TEST_JOBS, spark_env, tag_command

from cutover.cli.orders import EventSpec, make_orders, write_orders
from spark_tagger.cli import submit_args
from spark_tagger.spark_version import has_python_data_sources
from testground.brokers import create_topics
from tests.topics import read_topic


def _run(cmd: list[str], timeout: float = 180, connector: bool = True
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=spark_env(connector), cwd=REPO, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("version", ["blue green", "", "x" * 65, "v1/2", "grün"])
def test_bad_version_id_is_refused_before_anything_runs(version: str) -> None:
    res = _run(tag_command(version, JOBS / "windowed_totals.py", ["--bootstrap", "nowhere:1"]))
    assert res.returncode == 2
    assert "is not a version id" in res.stderr and "A-Z a-z 0-9 . _ -" in res.stderr
    assert "Traceback" not in res.stderr


def test_longest_valid_version_and_missing_job_file() -> None:
    res = _run(tag_command("v" * 64, TEST_JOBS / "does_not_exist.py", []))
    assert res.returncode == 2
    assert "does_not_exist.py" in res.stderr and "does not exist" in res.stderr
    assert "version" not in res.stderr


@pytest.mark.spark
@pytest.mark.broker
def test_undeterminable_event_time_stops_at_start_saying_what_to_pass(
    bootstrap: str, tmp_path: Path
) -> None:
    tin, tout = f"nowm-in-{uuid.uuid4().hex[:8]}", f"nowm-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: 2})
    write_orders(bootstrap, tin, make_orders(EventSpec(count=20)))
    res = _run(tag_command("blue", TEST_JOBS / "no_watermark.py",
                           [bootstrap, tin, tout, str(tmp_path / "ck")]))
    assert res.returncode == 2, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("cutover tag: cannot tell the event time")
    assert "--event-time COLUMN" in last
    assert "Traceback" not in res.stderr
    assert read_topic(bootstrap, tout) == []  # stopped before any batch
    assert not (tmp_path / "ck" / "commits").exists() or not any(
        (tmp_path / "ck" / "commits").iterdir())


@pytest.mark.spark
@pytest.mark.broker
# without the connector (the pure-Python source serving the reads) in make test-all: the
# default suite keeps CI's time budget, and tests/spark/test_kafka_source.py covers that source
@pytest.mark.parametrize("connector", [
    pytest.param(True, id="jvm-connector"),
    pytest.param(False, id="no-connector", marks=pytest.mark.slow)])
def test_event_time_flag_tags_a_job_without_watermark(bootstrap: str, tmp_path: Path,
                                                      connector: bool) -> None:
    """The same job with ``--event-time timestamp``: the Kafka timestamp of the input record,
    a column the job's final select dropped. With Spark's Kafka connector on the classpath it
    serves the job's reads (streaming and batch); without it the pure-Python source does
    (``--kafka-source auto``); the tagging sink writes either way."""
    if not connector and not has_python_data_sources():
        pytest.skip("Spark 3.5 has no Python data source API: the next test covers its refusal")
    tin, tout = f"etflag-in-{uuid.uuid4().hex[:8]}", f"etflag-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: 3})
    write_orders(bootstrap, tin, make_orders(EventSpec(count=30)))
    res = _run(tag_command("v2.0-rc_1", TEST_JOBS / "no_watermark.py",
                           [bootstrap, tin, tout, str(tmp_path / "ck")],
                           flags=["--event-time", "timestamp"]), connector=connector)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "event time: --event-time timestamp" in res.stderr
    reader = ("Spark's Kafka connector (spark-sql-kafka-0-10)" if connector
              else "the pure-Python source")
    assert f"cutover tag: Kafka reads served by {reader}" in res.stderr
    assert "records written: 30" in res.stdout  # the job's batch read("kafka") of its output
    sent = {(r.key, (r.value or b"").decode().upper().encode()): r.timestamp
            for r in read_topic(bootstrap, tin)}
    data = [r for r in read_topic(bootstrap, tout) if r.header("bg.kind") is None]
    assert len(data) == 30
    for r in data:
        assert r.header("bg.version") == "v2.0-rc_1"
        assert r.header("bg.event_time") == str(sent[(r.key, r.value)])
        assert r.header("bg.watermark") is None  # the query has no watermark


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.skipif(has_python_data_sources(), reason="Spark 4 serves it with the Python source")
@pytest.mark.parametrize("flags", [pytest.param([], id="auto"),
                                   pytest.param(["--kafka-source", "python"], id="python")])
def test_kafka_read_without_the_connector_on_spark35_stops_naming_the_package(
    bootstrap: str, tmp_path: Path, flags: list[str]
) -> None:
    """Spark 3.5 has no Python data source API, so without Spark's Kafka connector nothing
    can serve the job's Kafka read: one sentence at start names the connector to add."""
    tin, tout = f"nocon-in-{uuid.uuid4().hex[:8]}", f"nocon-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: 2})
    write_orders(bootstrap, tin, make_orders(EventSpec(count=10)))
    res = _run(tag_command("blue", JOBS / "windowed_totals.py",
                           ["--bootstrap", bootstrap, "--input", tin, "--output", tout,
                            "--checkpoint", str(tmp_path / "ck")], flags=flags),
               connector=False)
    assert res.returncode == 2, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("cutover tag: the job reads Kafka, "), last
    assert f"spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.12:{pyspark_version}" \
        in last
    assert "Traceback" not in res.stderr
    assert read_topic(bootstrap, tout) == []


@pytest.mark.spark
@pytest.mark.skipif(has_python_data_sources(), reason="Spark 4's Connect jobs are tagged")
def test_a_spark_connect_job_on_spark35_stops_at_start_naming_the_alternatives(
    tmp_path: Path
) -> None:
    res = _run(tag_command("blue", JOBS / "windowed_totals_connect.py",
                           ["--bootstrap", "127.0.0.1:1", "--input", "in", "--output", "out",
                            "--checkpoint", str(tmp_path / "ck"), "--remote", "local[2]"]))
    assert res.returncode == 2, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("cutover tag: the job builds a Spark Connect session "), last
    assert "run the job with a classic SparkSession on Spark 3.5, or on Spark Connect with " \
           "pyspark 4" in last
    assert "Traceback" not in res.stderr


def test_conf_flag_is_key_value_and_joins_pyspark_submit_args() -> None:
    res = _run(tag_command("blue", JOBS / "windowed_totals.py", [], flags=["--conf", "nokey"]))
    assert res.returncode == 2 and "is not KEY=VALUE" in res.stderr
    assert "Traceback" not in res.stderr
    assert submit_args("--master local[2] pyspark-shell", ["spark.ui.enabled=false"]) == (
        "--master 'local[2]' --conf spark.ui.enabled=false pyspark-shell")
    assert submit_args(None, ["a=b c"]) == "--conf 'a=b c' pyspark-shell"


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.parametrize(("shape", "sentence"), [
    pytest.param("overwrite", "cutover tag: the Kafka write in the foreachBatch function of "
                 "query 'mirror' uses save mode 'overwrite', which Spark's Kafka connector does "
                 "not allow either; use mode('append') or leave the default",
                 marks=pytest.mark.slow),   # make test-all: CI's time budget
    ("complete", "cutover tag: the query writing to topic {sink!r} uses complete output mode"),
    pytest.param("plain-batch", "cutover tag: a batch Kafka write outside any streaming "
                 "query's foreachBatch has no watermark to take its records' event time from; "
                 "pass --event-time COLUMN|EXPR", marks=pytest.mark.slow),
])
def test_shapes_that_cannot_be_tagged_stop_before_writing_with_a_sentence(
    bootstrap: str, tmp_path: Path, shape: str, sentence: str
) -> None:
    tin, tout = f"refused-in-{uuid.uuid4().hex[:8]}", f"refused-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: 2})
    write_orders(bootstrap, tin, make_orders(EventSpec(count=20)))
    ck = tmp_path / "ck"
    res = _run(tag_command("blue", TEST_JOBS / "refused_shapes.py",
                           [bootstrap, tin, tout, str(ck), shape]))
    assert res.returncode == 2, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(sentence.format(sink=tout)), last
    assert "Traceback" not in res.stderr
    assert read_topic(bootstrap, tout) == []  # nothing written, tagged or not
    assert not (ck / "commits").exists() or not any((ck / "commits").iterdir())
