"""The tagged data of the partition-count benchmark (tests/bench/test_partition_counts_bench.py):
the same events for every partition count, spread over a layout of routes x partitions.

Event ``i`` (event time ``BASE_T + 10 i``) is emitted by both versions, blue and green, on raw
partition ``slot % per_route`` of route ``slot // per_route`` (``slot = i % partitions``). Each
version writes micro-batches (a tenth of the events, 5,000 at most), each followed by a
heartbeat on every raw partition of every route (as the tagger does); every fifth micro-batch of
each version is replayed in part (its last tenth written again, as a job restarted from its
checkpoint does). The plan switches from blue to green at the middle event's time, so the
expected output is each event once, from blue below the switch and from green at and above it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer

from cutover.headers import Headers, TaggedRecord, heartbeat_headers
from cutover.plan import CutoverPlan, Segment

BASE_T = 1_767_225_600_000
STEP_MS = 10           # event time between consecutive events
MAX_BATCH = 5_000      # events per micro-batch of each version, at most
MIN_BATCHES = 10       # micro-batches of a backlog, at least (a smoke run's too)
REPLAY_EVERY = 5       # every fifth micro-batch is replayed in part:
REPLAYED_SHARE = 10    # its last tenth written again
VERSIONS = ("blue", "green")


@dataclass(frozen=True)
class Layout:
    """``routes`` routes of ``per_route`` partitions each; topic names carry ``tag``."""

    routes: int
    per_route: int
    tag: str

    @property
    def partitions(self) -> int:
        return self.routes * self.per_route

    def route(self, r: int) -> str:
        return f"pc{r}"

    def raw(self, r: int) -> str:
        return f"pc-raw-{self.tag}-{r}"

    def output(self, r: int) -> str:
        return f"pc-out-{self.tag}-{r}"

    @property
    def control(self) -> str:
        return f"pc-ctl-{self.tag}"

    @property
    def status(self) -> str:
        return f"pc-st-{self.tag}"

    def place(self, i: int) -> tuple[int, int]:
        """(route, partition) of event ``i``."""
        slot = i % self.partitions
        return slot // self.per_route, slot % self.per_route


def layout_for(partitions: int, tag: str, per_route_max: int = 64) -> Layout:
    """Up to ``per_route_max`` partitions per route: 256 is 4 routes of 64."""
    routes = max(1, -(-partitions // per_route_max))
    if partitions % routes:
        raise ValueError(f"{partitions} partitions do not split into {routes} equal routes")
    return Layout(routes, partitions // routes, tag)


def switch_time(events: int) -> int:
    """The plan's boundary: blue below the middle event's time, green from it."""
    return BASE_T + (events // 2) * STEP_MS


def plans(layout: Layout, events: int) -> list[CutoverPlan]:
    boundary = switch_time(events)
    return [CutoverPlan(route=layout.route(r), epoch=1, segments=(
        Segment(from_event_time=None, primary="blue"),
        Segment(from_event_time=boundary, primary="green"))) for r in range(layout.routes)]


def primary(event_time: int, boundary: int) -> str:
    return "blue" if event_time < boundary else "green"


def value(i: int, version: str) -> bytes:
    return b'{"order": %d, "amount": %d, "by": "%s"}' % (i, i % 997, version.encode())


def parse_value(raw: bytes) -> tuple[int, str]:
    """(event index, version) of an output record's value."""
    doc = json.loads(raw)
    return int(doc["order"]), str(doc["by"])


class _Sender:
    def __init__(self, bootstrap: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                           "queue.buffering.max.messages": 2_000_000,
                           "batch.num.messages": 10_000})
        self.data = 0
        self.heartbeats = 0

    def send(self, topic: str, partition: int, val: bytes, key: bytes | None,
             headers: Headers) -> None:
        while True:
            try:
                self.p.produce(topic, val, key, partition=partition, headers=headers)
                return
            except BufferError:
                self.p.poll(0.05)

    def event(self, layout: Layout, i: int, version: str, batch: int) -> None:
        t = BASE_T + i * STEP_MS
        r, part = layout.place(i)
        hdrs = TaggedRecord(version=version, event_time=t, watermark=t - 1000,
                            batch=batch).to_headers()
        self.send(layout.raw(r), part, value(i, version), b"k%d" % i, hdrs)
        self.data += 1

    def heartbeat(self, layout: Layout, version: str, watermark: int, batch: int) -> None:
        beat = heartbeat_headers(version, watermark, batch)
        for r in range(layout.routes):
            for part in range(layout.per_route):
                self.send(layout.raw(r), part, b"", None, beat)
                self.heartbeats += 1


@dataclass(frozen=True)
class Backlog:
    events: int       # distinct events, each expected once on the output
    data: int         # raw data records: both versions, replays included
    heartbeats: int


def data_records(events: int) -> int:
    """Raw data records of a backlog of ``events``: both versions' records and replays."""
    replayed = sum(len(_replayed(batch)) for n, batch in enumerate(_batches(events))
                   if n % REPLAY_EVERY == REPLAY_EVERY - 1)
    return 2 * (events + replayed)


def events_for(raw_records: int) -> int:
    """The fewest events whose raw data records come to ``raw_records`` at least."""
    events = max(MIN_BATCHES, int(raw_records / (2 * (1 + 1 / (REPLAY_EVERY * REPLAYED_SHARE)))))
    while data_records(events) < raw_records:
        events += max(1, (raw_records - data_records(events)) // 3)
    return events


def _replayed(batch: range) -> range:
    return batch[-max(1, len(batch) // REPLAYED_SHARE):]


def batch_size(events: int) -> int:
    return max(1, min(MAX_BATCH, events // MIN_BATCHES))


def _batches(events: int) -> Iterable[range]:
    size = batch_size(events)
    for start in range(0, events, size):
        yield range(start, min(events, start + size))


def fill(bootstrap: str, layout: Layout, events: int) -> Backlog:
    """Write the backlog to the raw topics of ``layout``: blue's and green's micro-batches
    interleaved, each followed by its heartbeats, every tenth replayed in part."""
    s = _Sender(bootstrap)
    for batch_id, batch in enumerate(_batches(events)):
        for v in VERSIONS:
            for i in batch:
                s.event(layout, i, v, batch_id)
            if batch_id % REPLAY_EVERY == REPLAY_EVERY - 1:
                for i in _replayed(batch):
                    s.event(layout, i, v, batch_id)
            s.heartbeat(layout, v, BASE_T + batch[-1] * STEP_MS - 1000, batch_id)
        s.p.poll(0)
    s.p.flush(120)
    return Backlog(events, s.data, s.heartbeats)


class LiveFlow:
    """Events after the backlog, both versions, at ``rate`` events/s, with a heartbeat on every
    partition once a second; :attr:`next_event` is the next event index to be written."""

    def __init__(self, bootstrap: str, layout: Layout, first_event: int, rate: int) -> None:
        self.layout, self.rate = layout, rate
        self._batch = len(list(_batches(first_event)))  # the backlog's micro-batches
        self.next_event = first_event
        self._first = first_event
        self._sender = _Sender(bootstrap)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        s, started, beat_at = self._sender, time.monotonic(), time.monotonic()
        while not self._stop.is_set():
            due = self._first + int((time.monotonic() - started) * self.rate)
            while self.next_event < due:
                for v in VERSIONS:
                    s.event(self.layout, self.next_event, v, self._batch)
                self.next_event += 1
            if time.monotonic() - beat_at >= 1.0:   # a micro-batch a second
                beat_at = time.monotonic()
                t = BASE_T + (self.next_event - 1) * STEP_MS - 1000
                for v in VERSIONS:
                    s.heartbeat(self.layout, v, t, self._batch)
                self._batch += 1
            s.p.poll(0)
            time.sleep(0.005)
        s.p.flush(60)

    def stop(self) -> int:
        """Stop writing; the number of events written (the last one's index + 1)."""
        self._stop.set()
        self._thread.join(90)
        return self.next_event
