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
3. **failover, standby**: a second worker (``--instance-id w2``, a state directory of its own,
   as on its own disk) joins and takes its share; the first is killed with ``kill -9``. Figure:
   from the kill until every partition has output of a record written after the kill (the
   standby has no store of the partitions it takes over: it rebuilds them from the output log,
   as a standby does).
4. the flow stops; once every event has arrived, the output is checked: every event once
   (lost, duplicated), from the version the plan makes primary for its event time.

Then the routing rate at 64 partitions against 4 in rounds (``CUTOVER_BENCH_PARTITION_RATE_ROUNDS``,
5 by default): each round writes a fresh backlog at both counts, the order alternating; the
pass-through loop (tests/bench/passthrough.py) reads it first, then a fresh worker routes it
and its output is checked the same way, and the count's topics are deleted. A broker removes a
deleted topic's files ``log.segment.delete.delay.ms`` later (60 s by default), which put the
removal of an earlier count's hundreds of partition directories in the middle of a later
count's routing (seen as the slowest rounds); for the rounds the broker is told to remove them
at once, between measurements (in the whole run), and given its default back after. The
target takes
the median of the rounds' router shares: a single pass moves with what else the machine does
in its few seconds. The loop's share beside it says how much of a drop the client and the
broker make at that count without any routing.

Each target of the issue is printed with its figure, its ratio to the target and PASS or FAIL
(tests/bench/partition_targets.py); the benchmark asserts only that every step completed and
that no record was lost, duplicated or from the wrong version, never a speed.

Smoke run (small backlog, 4 and 16 partitions, a few minutes; its routing rate means nothing,
the backlog being a batch or two of the worker's):
``CUTOVER_BENCH_PARTITION_RAW=20000 CUTOVER_BENCH_PARTITION_COUNTS=4,16 pytest -m bench -s
tests/bench/test_partition_counts_bench.py``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from router.durability.checkpoint import checkpoint_topic
from testground.brokers import create_topics
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
from tests.bench.partition_targets import RateRound, Row, compared, median_share, targets
from tests.bench.passthrough import passthrough_measured
from tests.bench.report import load_line, record
from tests.bench.support import RouterChild

pytestmark = [pytest.mark.bench, pytest.mark.broker]

RAW_ENV = "CUTOVER_BENCH_PARTITION_RAW"
COUNTS_ENV = "CUTOVER_BENCH_PARTITION_COUNTS"
ROUNDS_ENV = "CUTOVER_BENCH_PARTITION_RATE_ROUNDS"
RAW_DEFAULT = 1_000_000
COUNTS_DEFAULT = "4,64,256"
ROUNDS_DEFAULT = 5       # rounds of the rate share (the whole measurement's is the first)
LIVE_RATE = 1_000        # events/s after the backlog (2,000 raw data records/s)
STEADY_S = 3.0           # flow on every partition before a kill
START_WAIT_S = 180.0     # a worker's start-up, at most
FAILOVER_WAIT_S = 300.0  # output on every partition after a kill, at most


def _raw_records() -> int:
    return int(os.environ.get(RAW_ENV, RAW_DEFAULT))


def _rounds() -> int:
    return max(1, int(os.environ.get(ROUNDS_ENV, ROUNDS_DEFAULT)))


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
    host). Each worker has a state directory of its own (its own disk in production); a worker
    restarted with the same instance id finds its own again."""
    path.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": layout.control,
        "status_topic": layout.status, "group_id": f"pc-{layout.tag}",
        "state_dir": str(state), "http_port": None,
        "routes": [{"name": layout.route(r), "inputs": [layout.raw(r)],
                    "output": layout.output(r)} for r in range(layout.routes)]}))
    return path


def _note(what: str, at: float, got: dict[int, float] | None) -> None:
    """A failover's times on the wall clock (to read beside the workers' logs) and the spread
    of the partitions' resumption."""
    wall = time.strftime("%H:%M:%S", time.gmtime(time.time() - (time.monotonic() - at)))
    spread = "output did not resume on every partition" if got is None else (
        f"first partition resumed after {min(got.values()) - at:.2f} s, the last after "
        f"{max(got.values()) - at:.2f} s")
    print(f"  {what} at {wall} UTC: {spread}", flush=True)


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


@dataclass
class Figures:
    """One partition count's figures as they are measured (None: not measured)."""

    first_output_s: float | None = None
    every_partition_output_s: float | None = None
    rate_per_s: float | None = None
    failover_same_id_s: float | None = None
    failover_standby_s: float | None = None
    threads: int | None = None
    rss_mb: float | None = None


class Run:
    """The steps of one partition count on its own topics: the backlog routed by one worker,
    then the two failovers with events flowing."""

    def __init__(self, bootstrap: str, tmp: Path, layout: Layout, events: int,
                 backlog: Backlog) -> None:
        self.bootstrap, self.tmp, self.layout = bootstrap, tmp, layout
        self.events, self.backlog = events, backlog
        self.configs = {w: _settings(tmp / f"router-{w}.yaml", bootstrap, layout,
                                     tmp / f"state-{w}") for w in ("w1", "w2")}
        self.reader = OutputReader(bootstrap, layout)
        self.workers: list[RouterChild] = []
        self.got = Figures()

    def worker(self, instance: str, log: str) -> RouterChild:
        w = RouterChild(self.configs[instance], self.tmp / log,
                        args=("--loglevel", "info", "--instance-id", instance))
        self.workers.append(w)
        return w

    def backlog_routed(self, raw_records: int) -> RouterChild | None:
        """Start one worker; start-up, rate, threads and RSS over the backlog. The worker, or
        None when the backlog was not routed."""
        reader, got = self.reader, self.got
        started = time.monotonic()
        print(f"  worker started at {time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
        w1 = self.worker("w1", "w1.log")
        watch = ProcWatch(w1.proc.pid)
        routed = reader.wait_count(self.events, START_WAIT_S + raw_records / 1_000)
        watch.stop()
        got.threads, got.rss_mb = watch.threads, round(watch.hwm_kb / 1024, 1)
        if reader.count():
            got.first_output_s = round(reader.stamps[0] - started, 2)
            firsts = reader.firsts_from(0)
            if len(firsts) == self.layout.partitions:
                got.every_partition_output_s = round(max(firsts.values()) - started, 2)
        if routed:
            span = reader.stamps[self.events - 1] - reader.stamps[0]
            got.rate_per_s = round(self.backlog.data / span) if span > 0 else None
        print(f"  backlog: first output after {got.first_output_s} s, on every partition after "
              f"{got.every_partition_output_s} s, {got.rate_per_s} raw data records/s; "
              f"{got.threads} threads, peak RSS {got.rss_mb} MB", flush=True)
        if not routed:
            print(f"  the backlog was not routed: {reader.count():,} of {self.events:,} "
                  f"outputs; worker log:\n{w1.tail(20)}", flush=True)
            return None
        return w1

    def same_id(self, w1: RouterChild, flow: LiveFlow) -> RouterChild | None:
        """kill -9, restarted at once with the same instance id; the restarted worker, or
        None when output did not resume on every partition."""
        w1.kill9()
        restarted, after = time.monotonic(), flow.next_event
        w1b = self.worker("w1", "w1-restarted.log")
        got = self.reader.wait_every_partition(after, FAILOVER_WAIT_S)
        _note("killed and restarted with the same instance id", restarted, got)
        if got is None:
            return None
        self.got.failover_same_id_s = round(max(got.values()) - restarted, 2)
        return w1b

    def standby(self, w1b: RouterChild, flow: LiveFlow) -> None:
        """A second worker joins and takes its share; kill -9 of the first."""
        w2 = self.worker("w2", "w2.log")
        try:
            w2.wait_started(START_WAIT_S)
        except AssertionError as exc:
            print(f"  the standby worker did not start: {exc}", flush=True)
            return
        if self.reader.wait_every_partition(flow.next_event, FAILOVER_WAIT_S) is None:
            print("  output did not flow on every partition with two workers", flush=True)
            return
        time.sleep(STEADY_S)
        w1b.kill9()
        killed, after = time.monotonic(), flow.next_event
        got = self.reader.wait_every_partition(after, FAILOVER_WAIT_S)
        _note("killed beside a standby", killed, got)
        if got is not None:
            self.got.failover_standby_s = round(max(got.values()) - killed, 2)

    def failovers(self, w1: RouterChild) -> int:
        """Both failovers with events flowing; the number of events written in all."""
        flow = LiveFlow(self.bootstrap, self.layout, self.events, LIVE_RATE)
        flow.start()
        try:
            if self.reader.wait_every_partition(self.events, FAILOVER_WAIT_S) is None:
                print("  the live events did not reach every partition", flush=True)
                return flow.stop()
            time.sleep(STEADY_S)
            w1b = self.same_id(w1, flow)
            if w1b is not None:
                self.standby(w1b, flow)
        finally:
            total = flow.stop()
        return total

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.reader.close()


def _fresh_backlog(bootstrap: str, partitions: int, raw_records: int) -> tuple[Layout, int,
                                                                             Backlog]:
    """Fresh topics for ``partitions``, the plans, and the backlog written: the layout, the
    number of events and the backlog."""
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
    return layout, events, backlog


def _measure(bootstrap: str, tmp: Path, partitions: int, raw_records: int) -> tuple[Row, Backlog]:
    tmp.mkdir(parents=True, exist_ok=True)
    layout, events, backlog = _fresh_backlog(bootstrap, partitions, raw_records)
    run = Run(bootstrap, tmp, layout, events, backlog)
    try:
        w1 = run.backlog_routed(raw_records)
        total = events if w1 is None else run.failovers(w1)
        run.reader.wait_count(total, 60)
        lost, duplicated, wrong = _check(run.reader, total, switch_time(events))
    finally:
        run.close()
        _delete_topics(bootstrap, layout, [])
    row = Row(partitions=partitions, routes=layout.routes, **asdict(run.got), lost=lost,
              duplicated=duplicated, wrong_version=wrong)
    print(f"{partitions} partitions: {row}", flush=True)
    return row, backlog


class RatePair(NamedTuple):
    """One count's rates in a round: the router's and the pass-through loop's."""

    router: float | None
    loop: float | None


def _rate(bootstrap: str, tmp: Path, partitions: int, raw_records: int) -> RatePair:
    """The routing rate alone: a fresh backlog read first by the pass-through loop (into a
    topic of its own: what the client and the broker give at this count without routing),
    then routed by a fresh worker (None: not routed). The output is checked as in a whole
    measurement; the count's topics are deleted afterwards, so that every round and count
    meets a broker holding the same topics."""
    tmp.mkdir(parents=True, exist_ok=True)
    layout, events, backlog = _fresh_backlog(bootstrap, partitions, raw_records)
    assert layout.routes == 1, "the rate rounds compare counts of one route"
    loop_out = f"{layout.output(0)}-loop"
    create_topics(bootstrap, {loop_out: layout.per_route})
    loop = passthrough_measured(bootstrap, layout.raw(0), loop_out,
                                backlog.data + backlog.heartbeats, layout.per_route)
    print(f"  pass-through loop: {loop.per_s:,.0f} raw records/s", flush=True)
    run = Run(bootstrap, tmp, layout, events, backlog)
    try:
        run.backlog_routed(raw_records)
        found = _check(run.reader, events, switch_time(events))
    finally:
        run.close()
        _delete_topics(bootstrap, layout, [loop_out])
    assert found == (0, 0, 0), \
        f"{partitions} partitions, rate round: (lost, duplicated, wrong version) = {found}"
    return RatePair(run.got.rate_per_s, loop.per_s)


def _delete_topics(bootstrap: str, layout: Layout, extra: list[str]) -> None:
    """Delete a layout's topics, its workers' checkpoint topic and ``extra``."""
    group = f"pc-{layout.tag}"
    topics = [layout.control, layout.status, checkpoint_topic(group), *extra] + [
        t for r in range(layout.routes)
        for t in (layout.raw(r), layout.output(r), f"{layout.output(r)}.dlq")]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, done in admin.delete_topics(topics, operation_timeout=30).items():
        try:
            done.result()
        except KafkaException as exc:
            print(f"  topic {topic} not deleted: {exc}", flush=True)


DELETE_DELAY = "log.segment.delete.delay.ms"


def _delete_delay(admin: AdminClient, value: str | None) -> None:
    """Set every broker's ``log.segment.delete.delay.ms`` (a dynamic setting, here per broker)
    to ``value``, or give them their default back (None)."""
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    entry = ConfigEntry(DELETE_DELAY, value or "", incremental_operation=op)
    brokers = [ConfigResource("broker", str(b))
               for b in sorted(admin.list_topics(timeout=15).brokers)]
    for done in admin.incremental_alter_configs(
            [ConfigResource(r.restype, r.name, incremental_configs=[entry])
             for r in brokers]).values():
        done.result(15)
    deadline = time.monotonic() + 30  # a broker applies it from the metadata log, soon after
    while True:
        seen = {r.name: described[DELETE_DELAY].value
                for r, f in admin.describe_configs(brokers).items()
                for described in [f.result(15)]}
        if all((v == value) if value is not None else (v != "0") for v in seen.values()):
            return
        if time.monotonic() > deadline:
            raise KafkaException(f"the brokers show {DELETE_DELAY} = {seen} after 30 s")
        time.sleep(0.2)


@contextmanager
def _files_removed_at_deletion(bootstrap: str) -> Iterator[None]:
    """Deleted topics' files removed at their deletion, between measurements (the module's
    docstring says why); a broker that refuses keeps its delay, and the run says so."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        _delete_delay(admin, "0")
    except KafkaException as exc:
        print(f"  {DELETE_DELAY} left as it is ({exc}): an earlier count's files may be "
              "removed during a later count's routing", flush=True)
        yield
        return
    try:
        yield
    finally:
        _delete_delay(admin, None)


def _rate_rounds(bootstrap: str, tmp: Path, rows: list[Row], raw_records: int,
                 rounds: int) -> list[RateRound]:
    """The rate share in rounds, each routing a fresh backlog at both counts, the order
    alternating, so that neither count always meets the broker warmer."""
    first_low, first_high = compared(rows)
    low, high = first_low.partitions, first_high.partitions
    out: list[RateRound] = []
    for k in range(rounds):
        high_first = k % 2 == 1
        rates: dict[int, RatePair] = {}
        for n in ((high, low) if high_first else (low, high)):
            rates[n] = _rate(bootstrap, tmp / f"rate{k}-p{n}", n, raw_records)
        out.append(RateRound(low, high, rates[low].router, rates[high].router, high_first,
                             rates[low].loop, rates[high].loop))
    return out


def _cell(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def test_partition_counts(bootstrap: str, tmp_path: Path) -> None:
    with _files_removed_at_deletion(bootstrap):
        _partition_counts(bootstrap, tmp_path)


def _partition_counts(bootstrap: str, tmp_path: Path) -> None:
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
    rounds = (_rate_rounds(bootstrap, tmp_path, rows, raw_records, _rounds())
              if len(rows) > 1 else [])
    for k, rr in enumerate(rounds, 1):
        share = "-" if rr.share is None else f"{rr.share:.1%}"
        loop = "-" if rr.loop_share is None else f"{rr.loop_share:.1%}"
        print(f"rate round {k} ({rr.high_partitions if rr.high_first else rr.low_partitions} "
              f"partitions first): {_cell(rr.low_rate, '{:,.0f}')} at {rr.low_partitions}, "
              f"{_cell(rr.high_rate, '{:,.0f}')} at {rr.high_partitions}: {share}; the "
              f"pass-through loop {_cell(rr.low_loop, '{:,.0f}')} and "
              f"{_cell(rr.high_loop, '{:,.0f}')}: {loop}")
    median, loop_median = median_share(rounds), median_share(rounds, loop=True)
    if median is not None:
        print(f"median share over {len(rounds)} rounds: {median:.1%}"
              + ("" if loop_median is None else f" (the pass-through loop's: {loop_median:.1%})"))
    checked = targets(rows, rounds)
    print("\ntargets:")
    for t in checked:
        print(f"  {t.line()}")
    record("partition_counts", {
        "raw_records": backlogs[0].data, "events": backlogs[0].events,
        "heartbeats": {str(r.partitions): b.heartbeats for r, b in zip(rows, backlogs,
                                                                         strict=True)},
        "live_rate": LIVE_RATE,
        "rows": [asdict(r) for r in rows],
        "rate_rounds": [{**asdict(rr), "share": rr.share, "loop_share": rr.loop_share}
                        for rr in rounds],
        "targets": [{**asdict(t), "ratio": t.ratio, "passed": t.passed} for t in checked]})
    for r in rows:
        assert r.first_output_s is not None and r.rate_per_s is not None, \
            f"{r.partitions} partitions: the backlog was not routed"
        assert r.failover_same_id_s is not None and r.failover_standby_s is not None, \
            f"{r.partitions} partitions: output did not resume on every partition"
        assert (r.lost, r.duplicated, r.wrong_version) == (0, 0, 0), r
