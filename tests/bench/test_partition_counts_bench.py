"""Production partition counts: what one router worker costs at 4, 64 and 256 partitions
(``make bench``), on Apache Kafka with broker defaults, the same tagged data for every count.

For each partition count (256 as 4 routes x 64), on fresh topics:

1. **backlog**: the raw topics hold ``CUTOVER_BENCH_PARTITION_RAW`` raw data records (default
   1,000,000: both versions, replays, one switch; heartbeats on every partition besides;
   tests/bench/partition_backlog.py). One worker (``cutover router --instance-id w1``, default
   settings) starts; a ``read_committed`` consumer of the outputs notes when each record
   arrives. Figures: start to first output (and to output on every partition); the routing rate,
   raw data records / (last output - first output) (the first batch's routing is outside that
   window, the same share at every count); the worker's threads (the most seen in
   ``/proc/<pid>/status`` while it routes the backlog) and its peak RSS (VmHWM) once done.
2. **failover, same instance id**: events keep arriving (``LIVE_RATE`` a second, both versions,
   on every partition); the worker is killed with ``kill -9`` and restarted at once with the
   same instance id. Figure: from the restart until every partition has output of a record
   written after the restart (only the new worker can have routed it).
3. **failover, standby**: a second worker (``--instance-id w2``) joins and takes its share;
   the first is killed with ``kill -9``. Figure: from the kill until every partition has output
   of a record written after the kill.
4. the flow stops; once every event has arrived, the output is checked: every event once
   (lost, duplicated), from the version the plan makes primary for its event time.

Each target of the issue is printed with its figure, its ratio to the target and PASS or FAIL
(tests/bench/partition_targets.py); the benchmark asserts only that every step completed and
that no record was lost, duplicated or from the wrong version, never a speed.

Smoke run (small backlog, 4 and 16 partitions, a minute or two):
``CUTOVER_BENCH_PARTITION_RAW=20000 CUTOVER_BENCH_PARTITION_COUNTS=4,16 pytest -m bench -s
tests/bench/test_partition_counts_bench.py``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.broker import create_topics
from tests.bench.partition_backlog import (
    BASE_T,
    STEP_MS,
    Backlog,
    Layout,
    LiveFlow,
    events_for,
    fill,
    layout_for,
    parse_value,
    plans,
    primary,
    switch_time,
)
from tests.bench.partition_targets import Row, targets
from tests.bench.report import load_line, record
from tests.bench.support import RouterChild

pytestmark = [pytest.mark.bench, pytest.mark.broker]

RAW_ENV = "CUTOVER_BENCH_PARTITION_RAW"
COUNTS_ENV = "CUTOVER_BENCH_PARTITION_COUNTS"
RAW_DEFAULT = 1_000_000
COUNTS_DEFAULT = "4,64,256"
LIVE_RATE = 1_000        # events/s after the backlog (2,000 raw data records/s)
STEADY_S = 3.0           # flow on every partition before a kill
START_WAIT_S = 180.0     # a worker's start-up, at most
FAILOVER_WAIT_S = 120.0  # output on every partition after a kill, at most


def _raw_records() -> int:
    return int(os.environ.get(RAW_ENV, RAW_DEFAULT))


def _counts() -> list[int]:
    return [int(x) for x in os.environ.get(COUNTS_ENV, COUNTS_DEFAULT).split(",") if x.strip()]


class OutputReader:
    """Reads every output partition of a layout from its start with ``read_committed`` and
    notes, per record, when it arrived, its partition (route x per_route + partition), its
    event index and its value."""

    def __init__(self, bootstrap: str, layout: Layout) -> None:
        self.layout = layout
        self.stamps: list[float] = []
        self.slots: list[int] = []
        self.orders: list[int] = []
        self.values: list[bytes] = []
        self._c = Consumer({"bootstrap.servers": bootstrap,
                            "group.id": f"pc-read-{uuid.uuid4().hex[:6]}",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                            "isolation.level": "read_committed"})
        self._c.assign([TopicPartition(layout.output(r), p, 0)
                        for r in range(layout.routes) for p in range(layout.per_route)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        topics = {self.layout.output(r): r for r in range(self.layout.routes)}
        per = self.layout.per_route
        while not self._stop.is_set():
            msgs = self._c.consume(10_000, 0.05)
            now = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    continue
                v = m.value() or b""
                self.slots.append(topics[m.topic() or ""] * per + (m.partition() or 0))
                self.orders.append(int(v[10:v.index(b",", 10)]))  # b'{"order": N, ...'
                self.values.append(v)
                self.stamps.append(now)   # last: a reader of the lists sees complete rows
        self._c.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def count(self) -> int:
        return len(self.stamps)

    def wait_count(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def firsts_from(self, first_order: int, since: int = 0) -> dict[int, float]:
        """Per partition, when the first record of event ``first_order`` or later arrived
        (looking at the records from the ``since``-th on)."""
        out: dict[int, float] = {}
        self._scan(first_order, since, out)
        return out

    def _scan(self, first_order: int, since: int, out: dict[int, float]) -> int:
        n = self.count()
        orders, slots, stamps = self.orders, self.slots, self.stamps
        for k in range(since, n):
            if orders[k] >= first_order and slots[k] not in out:
                out[slots[k]] = stamps[k]
        return n

    def wait_every_partition(self, first_order: int, timeout: float) -> dict[int, float] | None:
        """Until every partition has output of event ``first_order`` or later, written from
        now on (None: not in ``timeout``)."""
        deadline = time.monotonic() + timeout
        out: dict[int, float] = {}
        since = self.count()
        while time.monotonic() < deadline:
            since = self._scan(first_order, since, out)
            if len(out) == self.layout.partitions:
                return out
            time.sleep(0.25)
        return None


class ProcWatch:
    """The most threads a process had while watched, and its peak RSS (VmHWM)."""

    def __init__(self, pid: int) -> None:
        self.status = Path(f"/proc/{pid}/status")
        self.threads = 0
        self.hwm_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        try:
            lines = self.status.read_text().splitlines()
        except OSError:
            return
        for line in lines:
            if line.startswith("Threads:"):
                self.threads = max(self.threads, int(line.split()[1]))
            elif line.startswith("VmHWM:"):
                self.hwm_kb = max(self.hwm_kb, int(line.split()[1]))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.25)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()


def _settings(path: Path, bootstrap: str, layout: Layout, state: Path) -> Path:
    """Default router settings, one route per raw topic; no HTTP port (two workers share the
    host)."""
    path.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": layout.control,
        "status_topic": layout.status, "group_id": f"pc-{layout.tag}",
        "state_dir": str(state), "http_port": None,
        "routes": [{"name": layout.route(r), "inputs": [layout.raw(r)],
                    "output": layout.output(r)} for r in range(layout.routes)]}))
    return path


def _worker(config: Path, log: Path, instance: str) -> RouterChild:
    return RouterChild(config, log, args=("--loglevel", "info", "--instance-id", instance))


def _check(reader: OutputReader, events: int, boundary: int) -> tuple[int, int, int]:
    """(lost, duplicated, wrong version) over events 0 .. events - 1."""
    seen = Counter(reader.orders[:reader.count()])
    lost = sum(1 for i in range(events) if i not in seen)
    duplicated = sum(n - 1 for n in seen.values())
    wrong = 0
    for v in reader.values[:reader.count()]:
        i, version = parse_value(v)
        if i >= events or version != primary(BASE_T + i * STEP_MS, boundary):
            wrong += 1
    return lost, duplicated, wrong


def _measure(bootstrap: str, tmp: Path, partitions: int, raw_records: int) -> tuple[Row, Backlog]:
    tmp.mkdir(parents=True, exist_ok=True)
    layout = layout_for(partitions, uuid.uuid4().hex[:8])
    topics: dict[str, int] = {layout.control: 1, layout.status: 1}
    for r in range(layout.routes):
        for t in (layout.raw(r), layout.output(r), f"{layout.output(r)}.dlq"):
            topics[t] = layout.per_route
    create_topics(bootstrap, topics, compacted=[layout.control])
    events = events_for(raw_records)
    p = Producer({"bootstrap.servers": bootstrap})
    for plan in plans(layout, events):
        p.produce(layout.control, plan.to_json(), plan.route.encode())
    p.flush(10)
    filled = time.monotonic()
    backlog = fill(bootstrap, layout, events)
    print(f"\n{partitions} partitions ({layout.routes} x {layout.per_route}): backlog of "
          f"{backlog.data:,} raw data records ({events:,} events) and {backlog.heartbeats:,} "
          f"heartbeats written in {time.monotonic() - filled:.1f} s", flush=True)
    config = _settings(tmp / "router.yaml", bootstrap, layout, tmp / "state")
    reader = OutputReader(bootstrap, layout)
    workers: list[RouterChild] = []
    flow: LiveFlow | None = None
    first_s = every_s = rate = same_id_s = standby_s = None
    threads = rss_mb = None
    try:
        started = time.monotonic()
        w1 = _worker(config, tmp / "w1.log", "w1")
        workers.append(w1)
        watch = ProcWatch(w1.proc.pid)
        routed = reader.wait_count(events, START_WAIT_S + raw_records / 1_000)
        watch.stop()
        threads, rss_mb = watch.threads, round(watch.hwm_kb / 1024, 1)
        if reader.count():
            first_s = round(reader.stamps[0] - started, 2)
            firsts = reader.firsts_from(0)
            if len(firsts) == layout.partitions:
                every_s = round(max(firsts.values()) - started, 2)
        if routed:
            span = reader.stamps[events - 1] - reader.stamps[0]
            rate = round(backlog.data / span) if span > 0 else None
        else:
            print(f"the backlog was not routed: {reader.count():,} of {events:,} outputs; "
                  f"worker log:\n{w1.tail(20)}", flush=True)

        flow = LiveFlow(bootstrap, layout, events, LIVE_RATE)
        flow.start()
        if routed and reader.wait_every_partition(events, FAILOVER_WAIT_S) is not None:
            time.sleep(STEADY_S)
            w1.kill9()
            restarted, after = time.monotonic(), flow.next_event
            w1b = _worker(config, tmp / "w1-restarted.log", "w1")
            workers.append(w1b)
            got = reader.wait_every_partition(after, FAILOVER_WAIT_S)
            same_id_s = None if got is None else round(max(got.values()) - restarted, 2)

            w2 = _worker(config, tmp / "w2.log", "w2")
            workers.append(w2)
            w2.wait_started(START_WAIT_S)
            if reader.wait_every_partition(flow.next_event, FAILOVER_WAIT_S) is not None:
                time.sleep(STEADY_S)
                w1b.kill9()
                killed, after = time.monotonic(), flow.next_event
                got = reader.wait_every_partition(after, FAILOVER_WAIT_S)
                standby_s = None if got is None else round(max(got.values()) - killed, 2)
        total = flow.stop()
        flow = None
        reader.wait_count(total, 60)
        lost, duplicated, wrong = _check(reader, total, switch_time(events))
    finally:
        if flow is not None:
            flow.stop()
        for w in workers:
            w.stop()
        reader.close()
    row = Row(partitions=partitions, routes=layout.routes, first_output_s=first_s,
              every_partition_output_s=every_s, rate_per_s=rate, failover_same_id_s=same_id_s,
              failover_standby_s=standby_s, threads=threads, rss_mb=rss_mb, lost=lost,
              duplicated=duplicated, wrong_version=wrong)
    print(f"{partitions} partitions: {row}", flush=True)
    return row, backlog


def _cell(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def test_partition_counts(bootstrap: str, tmp_path: Path) -> None:
    raw_records, counts = _raw_records(), _counts()
    rows: list[Row] = []
    backlogs: list[Backlog] = []
    for n in counts:
        row, backlog = _measure(bootstrap, tmp_path / f"p{n}", n, raw_records)
        rows.append(row)
        backlogs.append(backlog)
    print(f"\none worker, {backlogs[0].data:,} raw data records of the same {backlogs[0].events:,}"
          f" events at every count; {load_line()}")
    print(f"{'partitions':>10} {'first out s':>11} {'all out s':>9} {'records/s':>10} "
          f"{'same id s':>9} {'standby s':>9} {'threads':>7} {'RSS MB':>7} "
          f"{'lost':>5} {'dup':>5} {'wrong':>5}")
    for r in rows:
        print(f"{r.partitions:>10} {_cell(r.first_output_s):>11} "
              f"{_cell(r.every_partition_output_s):>9} {_cell(r.rate_per_s, '{:,.0f}'):>10} "
              f"{_cell(r.failover_same_id_s):>9} {_cell(r.failover_standby_s):>9} "
              f"{_cell(r.threads, '{:d}'):>7} {_cell(r.rss_mb, '{:,.0f}'):>7} "
              f"{r.lost:>5} {r.duplicated:>5} {r.wrong_version:>5}")
    checked = targets(rows)
    print("\ntargets:")
    for t in checked:
        print(f"  {t.line()}")
    record("partition_counts", {
        "raw_records": backlogs[0].data, "events": backlogs[0].events,
        "heartbeats": {str(r.partitions): b.heartbeats for r, b in zip(rows, backlogs,
                                                                         strict=True)},
        "live_rate": LIVE_RATE,
        "rows": [asdict(r) for r in rows],
        "targets": [{**asdict(t), "ratio": t.ratio, "passed": t.passed} for t in checked]})
    for r in rows:
        assert r.first_output_s is not None and r.rate_per_s is not None, \
            f"{r.partitions} partitions: the backlog was not routed"
        assert r.failover_same_id_s is not None and r.failover_standby_s is not None, \
            f"{r.partitions} partitions: output did not resume on every partition"
        assert (r.lost, r.duplicated, r.wrong_version) == (0, 0, 0), r
