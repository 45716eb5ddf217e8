"""Helpers for the Spark tests: running ``cutover tag`` as users do, and recomputing from the
checkpoint and the input what every tagged record must say."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from cutover.cli.orders import Order
from cutover.headers import BATCH, EVENT_TIME, KIND, parse_headers
from spark_tagger.checkpoint import OffsetLogMetadata, parse_offset_log
from spark_tagger.tagger import BatchReport
from tests.topics import RawRecord

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "examples" / "jobs"
TEST_JOBS = Path(__file__).resolve().parent / "jobs"

SPARK_SUBMIT_ARGS = ("--master local[2] --driver-memory 1g "
                     "--conf spark.sql.shuffle.partitions=2 --conf spark.ui.enabled=false "
                     "--conf spark.sql.session.timeZone=UTC")
# Spark's own Kafka connector (spark-sql-kafka-0-10 and the jars pyspark lacks), fetched by
# `make jvm`; the jobs run with it on the classpath, as users run them.
CONNECTOR_JARS_ENV = "CUTOVER_SPARK_KAFKA_JARS"
CONNECTOR_DIR = REPO / ".cache" / "jvm" / "spark-kafka"


def connector_jars() -> list[Path]:
    """The connector's jars; a clear failure when they were not fetched."""
    folder = Path(os.environ.get(CONNECTOR_JARS_ENV) or CONNECTOR_DIR)
    jars = sorted(folder.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10") for j in jars):
        raise RuntimeError(f"no spark-sql-kafka-0-10 jar in {folder}: run `make jvm`, or set "
                           f"{CONNECTOR_JARS_ENV} to a folder holding the connector's jars")
    return jars


def spark_env(connector: bool = True) -> dict[str, str]:
    """The environment of a ``cutover tag`` run: local mode, small, UTC; with Spark's Kafka
    connector on the classpath unless ``connector`` is False."""
    jars = f" --jars {','.join(map(str, connector_jars()))}" if connector else ""
    env = dict(os.environ)
    env.update({
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYSPARK_SUBMIT_ARGS": f"{SPARK_SUBMIT_ARGS}{jars} pyspark-shell",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def cutover_command() -> list[str]:
    script = Path(sys.executable).parent / "cutover"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cutover.cli"]


def tag_command(version: str, job: Path | str, job_args: Sequence[str],
                flags: Sequence[str] = ()) -> list[str]:
    return [*cutover_command(), "tag", "--version", version, *flags, "--", str(job),
            *job_args]


@dataclass
class TagRun:
    """A ``cutover tag`` subprocess (own process group, so kill -9 takes Spark with it)."""

    cmd: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)  # over spark_env()
    proc: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> TagRun:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**spark_env(), **self.env},
                                         cwd=REPO, start_new_session=True)
        return self

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"cutover tag did not finish within {timeout:.0f}s:\n"
                                 f"{self.tail()}") from None

    def kill(self) -> None:
        """kill -9 of the whole job: launcher, JVM and Python workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def reports(self) -> list[BatchReport]:
        """The per-batch lines (Spark's progress bar may share a line with them, after a CR;
        on Spark Connect another process's output may follow one on its line)."""
        marker = "cutover tag: {"
        decode = json.JSONDecoder().raw_decode
        return [BatchReport.model_validate(decode(line, line.index(marker) + len(marker) - 1)[0])
                for line in self.text().splitlines() if marker in line]


# A job on Spark Connect with remote("local[N]") starts its own Connect server. PySpark's
# testing mode binds it to an ephemeral port and has the client find it, so that two such jobs
# (blue and green) can run side by side; without it every server takes port 15002.
CONNECT_LOCAL_ENV = {"SPARK_TESTING": "1"}


def run_tag(cmd: list[str], log: Path, timeout: float = 300.0,
            env: dict[str, str] | None = None) -> TagRun:
    run = TagRun(cmd, log, env or {}).start()
    code = run.wait(timeout)
    assert code == 0, f"cutover tag exited {code}:\n{run.tail()}"
    return run


# ----------------------------------------------------------------------------- checkpoint


@dataclass(frozen=True)
class OffsetLog:
    batch: int
    meta: OffsetLogMetadata
    ends: dict[int, int]  # input partition -> end offset (exclusive) of this batch


def offset_logs(checkpoint: Path, topic: str) -> list[OffsetLog]:
    """Every ``offsets/<id>`` file of the query, in batch order."""
    out = []
    for f in (checkpoint / "offsets").iterdir():
        if not f.name.isdigit():
            continue
        text = f.read_text()
        source = json.loads(text.splitlines()[2])
        ends = {int(p): int(o) for p, o in source[topic].items()}
        out.append(OffsetLog(int(f.name), parse_offset_log(text), ends))
    return sorted(out, key=lambda x: x.batch)


def committed_batches(checkpoint: Path) -> set[int]:
    commits = checkpoint / "commits"
    if not commits.exists():
        return set()
    return {int(f.name) for f in commits.iterdir() if f.name.isdigit()}


def assign_batches(logs: list[OffsetLog], inputs: dict[tuple[int, int], Any],
                   first_start: dict[int, int] | None = None) -> dict[tuple[int, int], int]:
    """(input partition, offset) -> id of the batch that read it."""
    out: dict[tuple[int, int], int] = {}
    prev = dict(first_start or {})
    for log in logs:
        for (p, o) in inputs:
            if prev.get(p, 0) <= o < log.ends.get(p, 0):
                out[(p, o)] = log.batch
        prev = dict(log.ends)
    return out


def expected_watermarks(logs: list[OffsetLog], orders: dict[tuple[int, int], Order],
                        delay_ms: int) -> dict[int, int | None]:
    """Spark's rule: wm(n) = max(wm(n-1), max event time read by batches < n - delay); 0 = none."""
    batch = assign_batches(logs, orders)
    out: dict[int, int | None] = {}
    wm = 0
    max_seen: int | None = None
    for log in logs:
        out[log.batch] = wm or None
        times = [orders[pos].ts for pos, b in batch.items() if b == log.batch]
        if times:
            max_seen = max(times) if max_seen is None else max(max_seen, *times)
            wm = max(wm, max_seen - delay_ms)
    return out


def orders_by_position(records: list[RawRecord]) -> dict[tuple[int, int], Order]:
    return {(r.partition, r.offset): Order.model_validate_json(r.value or b"") for r in records}


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class OutputWatcher:
    """Follows the output topic while the job runs, to kill it at the right moment.

    ``label`` names the query a data record comes from, by its value, on a topic that several
    queries write (their batch ids overlap; heartbeats do not say which query sent them)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 label: Callable[[bytes | None], str] = lambda value: "") -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kill-watch",
                                  "enable.auto.commit": False, "enable.partition.eof": False,
                                  "fetch.wait.max.ms": 20})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.label = label
        self.data_batches: set[int] = set()
        self.beat_batches: set[int] = set()
        self.data_by_query: dict[str, set[int]] = defaultdict(set)
        self.beats: Counter[tuple[int, int]] = Counter()  # (batch, partition) -> heartbeats

    def poll(self) -> None:
        for msg in self.consumer.consume(500, 0.1):
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            tagged = parse_headers(msg.headers())
            assert tagged.batch is not None
            if tagged.kind == "heartbeat":
                self.beat_batches.add(tagged.batch)
                self.beats[(tagged.batch, msg.partition())] += 1
            else:
                self.data_batches.add(tagged.batch)
                self.data_by_query[self.label(msg.value())].add(tagged.batch)

    def mid_batch(self) -> int | None:
        """A batch some of whose data is out but whose heartbeats are not: it is running."""
        self.poll()
        running = [b for b in self.data_batches - self.beat_batches if b >= 1]
        return min(running) if running else None


def check_heartbeats(records: Sequence[RawRecord], committed: Iterable[int], partitions: int,
                     senders: Counter[int] | None = None) -> None:
    """Every committed batch's heartbeats reach every partition of the topic, and a batch's
    heartbeats on one partition (the original and a replay's copy) are byte-identical.

    On a topic several queries write, ``senders`` counts the queries that committed each batch
    id: a partition then holds at least that many heartbeats of the batch, and their copies
    need not be identical (a shared topic's heartbeat carries the lowest watermark of the
    job's queries at the time it is sent, which a replay or the other query need not see)."""
    beats: dict[tuple[int, int], list[RawRecord]] = defaultdict(list)
    for r in records:
        if r.header(KIND):
            beats[(int(r.header(BATCH) or -1), r.partition)].append(r)
    for b in committed:
        for p in range(partitions):
            got = beats[(b, p)]
            if senders is None:
                assert got and len({r.content for r in got}) == 1, (
                    f"batch {b}, partition {p}: heartbeats {[r.headers for r in got]}")
            else:
                assert len(got) >= senders[b], (
                    f"batch {b}, partition {p}: {len(got)} heartbeats, {senders[b]} queries "
                    "committed it")


def kill_mid_batch(run: TagRun, watcher: OutputWatcher, checkpoint: Path,
                   timeout: float = 400.0) -> int:
    """kill -9 of ``run`` while a batch has written records to the watched topic but neither
    its heartbeats nor its commit (in ``checkpoint``) are done; that batch's id."""
    try:

        def running() -> int | None:
            assert run.proc.poll() is None, f"the job ended early:\n{run.tail()}"
            batch = watcher.mid_batch()
            return (batch if batch is not None and batch not in committed_batches(checkpoint)
                    else None)

        killed_in: int = wait_for(running, timeout, "a batch in progress", interval=0.02)
        run.kill()
    finally:
        if run.proc.poll() is None:
            run.kill()
        watcher.consumer.close()
    assert killed_in not in committed_batches(checkpoint), "the batch was committed: not mid-batch"
    return killed_in


Meaning = tuple[bytes | None, bytes | None, str]


def meaning(records: Sequence[RawRecord]) -> Counter[Meaning]:
    """The data records as (key, value, event time), with how many copies of each."""
    return Counter((r.key, r.value, r.header(EVENT_TIME) or "") for r in records
                   if not r.header(KIND))


def check_replay(reference: Sequence[RawRecord], after: Sequence[RawRecord],
                 committed: Iterable[int], partitions: int, killed_in: int | None) -> None:
    """A topic written by a run killed and restarted, against the same job's straight run: the
    same records (key, value, event time), a copy only of a record of the killed batch (if
    ``killed_in``) and byte-identical to it, headers included; heartbeats as
    :func:`check_heartbeats` says."""
    assert set(meaning(after)) == set(meaning(reference)), "records lost or invented"
    assert all(n == 1 for n in meaning(reference).values())
    copies: dict[Meaning, list[RawRecord]] = defaultdict(list)
    for r in after:
        if not r.header(KIND):
            copies[(r.key, r.value, r.header(EVENT_TIME) or "")].append(r)
    doubled = [rs for rs in copies.values() if len(rs) > 1]
    for rs in doubled:
        assert len(rs) == 2 and len({r.content for r in rs}) == 1, "a replayed copy differs"
    if killed_in is not None:
        assert doubled, "the kill interrupted no batch that had written records"
        assert {parse_headers(list(rs[0].headers)).batch for rs in doubled} == {killed_in}
    check_heartbeats(after, committed, partitions)
