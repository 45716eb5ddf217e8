"""The parts of the Kafka Streams anchor benchmark (tests/bench/test_streams_anchor_bench.py):
the tagged backlog and its reference output, the Kafka Streams application as a child process,
a process's CPU time read from /proc, and the output watched and checked from outside."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.headers import TaggedRecord, heartbeat_headers
from tests.children import Child

REPO = Path(__file__).resolve().parents[2]
STREAMS_ROUTER_ENV = "CUTOVER_STREAMS_ROUTER"
MAIN_CLASS = "cutover.streams.StreamsRouter"
# the raw record's headers every forwarded record keeps
TAGS = {"bg.version", "bg.event_time", "bg.watermark", "bg.batch"}

BASE_T = 1_767_225_600_000
BATCH = 1000         # events per emulated micro-batch, each followed by a heartbeat per partition
REPLAY_EVERY = 10    # every tenth micro-batch of each version is written twice (a replay)


@dataclass(frozen=True)
class OutputRecord:
    """What identifies a forwarded record for the check: key, value, event time, version."""

    key: bytes | None
    value: bytes | None
    event_time: int
    version: str


@dataclass(frozen=True)
class Backlog:
    """A filled raw topic: how many raw records it holds, the switch's boundary and the output
    a correct router makes of it (each event once, from the primary of its event time)."""

    topic: str
    partitions: int
    raw_records: int
    boundary: int
    expected: frozenset[OutputRecord]


def _value(i: int, version: str) -> bytes:
    return b'{"order": %d, "amount": %d, "by": "%s"}' % (i, i % 997, version.encode())


def fill_backlog(bootstrap: str, topic: str, events: int, partitions: int) -> Backlog:
    """What the tagger writes (the router benchmark's data, tests/bench/test_router_bench.py):
    each version's micro-batches of data, each followed by a heartbeat on every partition;
    and, as after a restart of a job, every tenth micro-batch written a second time. Blue is
    primary below the boundary (the middle of the event times), green from it."""
    boundary = BASE_T + events * 5
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                  "queue.buffering.max.messages": 2_000_000, "batch.num.messages": 10000})
    n = 0

    def send(value: bytes, key: bytes | None, partition: int, hdrs: list) -> None:
        nonlocal n
        while True:
            try:
                p.produce(topic, value, key, partition=partition, headers=hdrs)
                n += 1
                return
            except BufferError:
                p.poll(0.05)

    for start in range(0, events, BATCH):
        batch = start // BATCH
        stop = min(start + BATCH, events)
        for v in ("blue", "green"):
            for _ in range(2 if batch % REPLAY_EVERY == REPLAY_EVERY - 1 else 1):
                for i in range(start, stop):
                    t = BASE_T + i * 10
                    hdrs = TaggedRecord(version=v, event_time=t, watermark=t - 1000,
                                        batch=batch).to_headers()
                    send(_value(i, v), b"k%d" % i, i % partitions, hdrs)
                beat = heartbeat_headers(v, BASE_T + (stop - 1) * 10 - 1000, batch)
                for part in range(partitions):
                    send(b"", None, part, beat)
    p.flush(120)
    expected = frozenset(
        OutputRecord(b"k%d" % i, _value(i, v), t, v)
        for i in range(events)
        for t in (BASE_T + i * 10,)
        for v in ("blue" if t < boundary else "green",))
    return Backlog(topic, partitions, n, boundary, expected)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread of it), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Footprint:
    threads: int
    peak_rss_mb: float


def footprint(pid: int) -> Footprint:
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return Footprint(int(status["Threads"]), int(status["VmHWM"].split()[0]) / 1024)


def streams_router_dir() -> Path:
    """Where ``make jvm-streams`` built the application (the jar and lib/)."""
    if os.environ.get(STREAMS_ROUTER_ENV):
        return Path(os.environ[STREAMS_ROUTER_ENV])
    kafka_libs = os.environ.get("CUTOVER_KAFKA_LIBS")
    for d in [REPO / ".cache" / "jvm" / "streams-router",
              *([Path(kafka_libs).parent / "streams-router"] if kafka_libs else [])]:
        if (d / "streams-router.jar").exists():
            return d
    raise AssertionError(f"the Kafka Streams router is not built: run `make jvm-streams`, or "
                         f"set {STREAMS_ROUTER_ENV} to the folder holding streams-router.jar")


def start_streams_router(bootstrap: str, backlog: Backlog, output: str, app_id: str,
                         state_dir: Path, log: Path, threads: int = 1) -> Child:
    """The Kafka Streams application on ``backlog``; returns at once (it is started)."""
    d = streams_router_dir()
    java = shutil.which("java")
    assert java, "the Kafka Streams router needs Java 17 (java on PATH)"
    return Child([java, "-cp", f"{d / 'streams-router.jar'}:{d / 'lib'}/*", MAIN_CLASS,
                  "--bootstrap", bootstrap, "--input", backlog.topic, "--output", output,
                  "--dead-letter", f"{output}.dlq", "--boundary", str(backlog.boundary),
                  "--application-id", app_id, "--threads", str(threads),
                  "--state-dir", str(state_dir)], log)


@dataclass(frozen=True)
class Run:
    """One system's run over the backlog, seen from outside: from its first output record
    visible to a read_committed consumer to its last, raw records per second and CPU seconds
    of its process per raw record over that span; and the time from its start to its first
    output."""

    per_s: float
    cpu_us: float
    first_output_s: float
    threads: int
    peak_rss_mb: float


def watch(bootstrap: str, output: str, partitions: int, backlog: Backlog, pid: int,
          started: float, child: Child, timeout: float) -> Run:
    """Counts ``output``'s committed records until every expected one is there, noting the
    clocks at the first and the last."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{output}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(output, p, 0) for p in range(partitions)])
    want = len(backlog.expected)
    got = first = 0
    t0 = cpu0 = 0.0
    deadline = time.monotonic() + timeout
    try:
        while got < want:
            assert time.monotonic() < deadline, (
                f"{got:,} of {want:,} records on {output} after {timeout:.0f} s:\n"
                f"{child.tail(40)}")
            assert child.alive(), f"the process exited:\n{child.tail(40)}"
            msgs = c.consume(10_000, 0.05)
            if msgs and not got:
                t0, cpu0 = time.monotonic(), cpu_seconds(pid)
                first = len(msgs)
            got += len(msgs)
        t1, cpu1 = time.monotonic(), cpu_seconds(pid)
        fp = footprint(pid)
    finally:
        c.close()
    raw = (want - first) / want * backlog.raw_records   # raw records behind the span's output
    return Run(per_s=raw / (t1 - t0), cpu_us=(cpu1 - cpu0) / raw * 1e6,
               first_output_s=t0 - started, threads=fp.threads, peak_rss_mb=fp.peak_rss_mb)


@dataclass(frozen=True)
class Checked:
    lost: int
    duplicated: int
    unexpected: int
    headers_lost: int


def check_output(bootstrap: str, output: str, partitions: int, backlog: Backlog) -> Checked:
    """Reads all of ``output`` (read_committed) and compares it with the reference: every
    expected record once, nothing else, each with the raw record's ``bg.*`` headers."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{output}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    tps = [TopicPartition(output, p, 0) for p in range(partitions)]
    ends = {tp.partition: c.get_watermark_offsets(tp, 30)[1] for tp in tps}
    c.assign(tps)
    seen: Counter[OutputRecord] = Counter()
    headers_lost = 0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10_000, 1.0)
            for m in msgs:
                h = dict(m.headers() or [])
                if not h.keys() >= TAGS:
                    headers_lost += 1
                seen[OutputRecord(m.key(), m.value(), int(h.get("bg.event_time", b"-1")),
                                  h.get("bg.version", b"").decode())] += 1
            # a transactional partition's last offset is its commit marker, never delivered
            if not msgs and all(tp.offset >= ends[tp.partition] - 1 or ends[tp.partition] == 0
                                for tp in c.position(tps)):
                break
        else:
            raise AssertionError(f"{output} not read to its end in 300 s")
    finally:
        c.close()
    return Checked(lost=len(backlog.expected - seen.keys()),
                   duplicated=sum(n - 1 for n in seen.values() if n > 1),
                   unexpected=sum(n for r, n in seen.items() if r not in backlog.expected),
                   headers_lost=headers_lost)
