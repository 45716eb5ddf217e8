"""Deterministic input for a cell and the emulated tagged job that writes it.

The job writes exactly what the tagger writes: the job's key and value, ``bg.version``,
``bg.event_time``, ``bg.watermark`` (the batch's watermark: the minimum over the sources of the
largest event time seen before the batch, less the allowed lateness) and ``bg.batch``, then a
heartbeat to every partition carrying the watermark after the batch. The watermark is honest by
construction: event times are out of order by less than the lateness, so no later record of a
source is below it. A crash is emulated as Spark does it: part of a batch is written, then the
job restarts from its checkpoint and replays whole batches byte for byte (same batch ids, same
watermarks, so heartbeats go backwards).

Two job shapes. *Stateless* (map, filter, enrich): batch b emits its own input, at or above the
batch's watermark W_b (computed from earlier batches), and the heartbeat after it carries the
watermark its input gives. *Windowed* (append-mode aggregation): batch b emits the records that
W_b closes, every pending one below W_b, so all of them sit below the watermark they carry; the
heartbeat after it carries W_b (what the tagger writes), and the rest stays pending.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any, NamedTuple

from confluent_kafka import Producer

from cutover.headers import TaggedRecord, heartbeat_headers
from tests.conformance.scenario import Scenario

BASE_T = 1_767_225_600_000   # event times start here (ms)
STEP = 10                    # ms between consecutive events of one source
LATENESS = 200               # allowed lateness; event times jitter by less than this
DIVERGENCE_MS = 3_000        # how far source B's event time trails source A's when "large"
PARTITIONS = 3
IDLE_ACTIVE = 2              # with idle partitions, only partitions 0 and 1 get data
PER_BATCH = 50               # events per source per micro-batch
PHASE1_BATCHES = 8           # before the switch
PHASE2_BATCHES = 12          # while the handover happens
PHASE3_BATCHES = 2           # after CLEAR_TO_TEARDOWN: the old version is torn down
TOTAL_BATCHES = PHASE1_BATCHES + PHASE2_BATCHES + PHASE3_BATCHES


class Event(NamedTuple):
    """One output record of the job, before tagging (both versions emit every event)."""

    source: str
    n: int
    key: bytes
    t: int
    partition: int
    amount: int


def generate(s: Scenario) -> list[list[Event]]:
    """The job's output, micro-batch by micro-batch, a pure function of the scenario."""
    rng = random.Random(s.seed)
    active = IDLE_ACTIVE if s.idle == "some" else PARTITIONS
    sources = [("a", 0)] + ([("b", DIVERGENCE_MS if s.divergence == "large" else 0)]
                            if s.sources == 2 else [])
    batches: list[list[Event]] = []
    for b in range(TOTAL_BATCHES):
        batch: list[Event] = []
        for name, lag in sources:
            for n in range(b * PER_BATCH, (b + 1) * PER_BATCH):
                key = f"{name}{n % 97}".encode()  # keys repeat; (key, t) never does
                t = BASE_T - lag + n * STEP + rng.randrange(LATENESS)
                batch.append(Event(name, n, key, t, zlib.crc32(key) % active,
                                   rng.randrange(1, 10_000)))
        rng.shuffle(batch)  # a union interleaves its sources
        batches.append(batch)
    return batches


def value_of(e: Event, version: str) -> bytes:
    return json.dumps({"src": e.source, "n": e.n, "t": e.t, "amount": e.amount,
                       "by": version}, separators=(",", ":")).encode()


class Sent(NamedTuple):
    partition: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes | None]]


class EmulatedJob:
    """One version of the job plus its tagger, writing to a raw topic."""

    def __init__(self, bootstrap: str, topic: str, version: str, batches: list[list[Event]],
                 sources: int, shape: str = "stateless") -> None:
        self.topic = topic
        self.version = version
        self.batches = batches
        self.sources = sources
        self.windowed = shape == "windowed"
        self.pending: list[Event] = []        # windowed: absorbed input not yet closed
        self.heartbeat_wm: int | None = None  # the watermark of the last heartbeat written
        self.next_batch = 0
        self.written: list[list[Sent]] = []   # per batch, exactly what went out (for replays)
        self.emitted: set[tuple[int, bytes, int]] = set()  # (partition, key, t) of data sent
        self._max: dict[str, int] = {}
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": False})

    @property
    def watermark(self) -> int | None:
        if len(self._max) < self.sources:
            return None  # no watermark until every source has been seen
        return min(self._max.values()) - LATENESS

    def run_batch(self, crash_after: float | None = None) -> None:
        """Process the next micro-batch; with ``crash_after`` write only that fraction of its
        records and die (no heartbeat, the batch is not committed)."""
        b = self.next_batch
        wm = self.watermark
        if self.windowed:
            emit = [e for e in self.pending if wm is not None and e.t < wm]
            keep = [e for e in self.pending if wm is None or e.t >= wm]
        else:
            emit, keep = self.batches[b], []
        out = [Sent(e.partition, e.key, value_of(e, self.version),
                    TaggedRecord(version=self.version, event_time=e.t, watermark=wm,
                                 batch=b).to_headers())
               for e in emit]
        if crash_after is not None:
            self._send(out[: int(len(out) * crash_after)])
            self.producer.flush(30)
            return
        for e in self.batches[b]:
            self._max[e.source] = max(self._max.get(e.source, e.t), e.t)
        for e in emit:
            self.emitted.add((e.partition, e.key, e.t))
        if self.windowed:
            self.pending = keep + self.batches[b]
        self.heartbeat_wm = wm if self.windowed else self.watermark
        out += [Sent(p, None, b"", heartbeat_headers(self.version, self.heartbeat_wm, b))
                for p in range(PARTITIONS)]
        self._send(out)
        self.producer.flush(30)
        self.written.append(out)
        self.next_batch += 1

    def replay(self, batches: int) -> None:
        """Restart from the checkpoint: the last ``batches`` committed batches and the one that
        crashed are produced again, byte for byte."""
        for out in self.written[-batches:]:
            self._send(out)
        self.producer.flush(30)
        self.run_batch()

    def _send(self, records: list[Sent]) -> None:
        for r in records:
            while True:
                try:
                    self.producer.produce(self.topic, r.value, r.key, partition=r.partition,
                                          headers=r.headers)
                    break
                except BufferError:
                    self.producer.poll(0.05)

    def max_t(self, partition: int) -> int | None:
        ts = [t for p, _, t in self.emitted if p == partition]
        return max(ts) if ts else None


def headers_of(msg: Any) -> dict[str, bytes]:
    return {k: v for k, v in (msg.headers() or []) if v is not None}
