"""The workload: two versions of a tagged job writing the same events at a steady rate.

Each micro-batch (one a second by default) holds the events of the time since the last one.
Both versions emit every event, with the same key and event time and a value that names the
version, then a heartbeat to every partition carrying the watermark after the batch, exactly
as the tagger writes (DESIGN.md, "Records on the raw topic"). Event time is the wall clock at
generation less a jitter below the allowed lateness, so the watermark (the largest event time
seen, less the lateness) is honest: no later record falls below one already announced.

Each version has its own idempotent producer (acks from every in-sync replica, retries for ten
minutes), as two Spark jobs would. What the broker acknowledged is what the checker expects;
the acknowledgement times per partition are the input's own gaps while leaders move.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from cutover.headers import TaggedRecord, heartbeat_headers

LATENESS_MS = 500
VERSIONS = ("blue", "green")


class Event(NamedTuple):
    """One event both versions emit: ``n`` is its identity in the checker; ``keyed``: written
    with the key :func:`key_of` gives, else with none (a null key)."""

    n: int
    partition: int
    t: int
    keyed: bool = True


def key_of(n: int) -> bytes:
    return f"k{n % 997}".encode()


def event_key(e: Event) -> bytes | None:
    """The Kafka key both versions write ``e`` with."""
    return key_of(e.n) if e.keyed else None


def value_of(n: int, t: int, version: str) -> bytes:
    return json.dumps({"n": n, "t": t, "by": version}, separators=(",", ":")).encode()


def parse_value(value: bytes) -> tuple[int, str]:
    """``(n, version)`` of a value :func:`value_of` wrote."""
    doc = json.loads(value)
    return int(doc["n"]), str(doc["by"])


@dataclass
class VersionLog:
    """What one version's producer got acknowledged: events by identity, and per partition the
    times (wall clock, seconds) of data acknowledgements."""

    delivered: set[int] = field(default_factory=set)
    failed: int = 0
    acked_at: dict[int, list[float]] = field(default_factory=dict)
    fatal_errors: list[str] = field(default_factory=list)


class Workload:
    """Both versions' jobs, run by one thread until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float,
                 seed: int, interval_s: float = 1.0, keyless_every: int = 0) -> None:
        self.bootstrap = bootstrap
        # every this-many-th event has no key (0: none), for a per-key canary's keyless records
        self.keyless_every = keyless_every
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.interval_s = interval_s
        self.rng = random.Random(seed)
        self.events: dict[int, Event] = {}
        self.logs: dict[str, VersionLog] = {
            v: VersionLog(acked_at={p: [] for p in range(partitions)}) for v in VERSIONS}
        self.producers = {v: self._producer(v) for v in VERSIONS}
        self.batch = 0
        self.max_t: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self.error: str | None = None

    def _producer(self, version: str) -> Producer:
        log = self.logs[version]

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                log.fatal_errors.append(err.str())

        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 600_000, "error_cb": on_error,
                         "log_level": 0})

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_s: float = 120.0) -> None:
        """Stop writing, then end both jobs: a last heartbeat to every partition with a
        watermark past every event written (nothing more will come), and wait for the acks."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(60)
        if self.max_t is not None:
            for version, producer in self.producers.items():
                for p in range(self.partitions):
                    self._send(producer, p, None, b"",
                               heartbeat_headers(version, self.max_t + 1, self.batch), None)
        for producer in self.producers.values():
            producer.flush(flush_s)

    def _run(self) -> None:
        last = time.time()
        carry = 0.0
        try:
            while not self._stop.is_set():
                now = time.time()
                carry += (now - last) * self.rate
                last = now
                count, carry = int(carry), carry - int(carry)
                self._write_batch(count)
                self._poll_until(now + self.interval_s)
        except Exception as exc:  # the soak reports it; the checker then sees what is missing
            self.error = f"{type(exc).__name__}: {exc}"

    def _poll_until(self, until: float) -> None:
        while not self._stop.is_set() and (left := until - time.time()) > 0:
            for producer in self.producers.values():
                producer.poll(min(0.05, left))

    def _write_batch(self, count: int) -> None:
        wm = None if self.max_t is None else self.max_t - LATENESS_MS
        now_ms = int(time.time() * 1000)
        batch: list[Event] = []
        for _ in range(count):
            n = len(self.events)
            keyed = not self.keyless_every or n % self.keyless_every != self.keyless_every - 1
            e = Event(n, n % self.partitions, now_ms - self.rng.randrange(LATENESS_MS // 2),
                      keyed)
            self.events[n] = e
            batch.append(e)
        if batch:
            self.max_t = max(self.max_t or 0, max(e.t for e in batch))
        after = None if self.max_t is None else self.max_t - LATENESS_MS
        for version, producer in self.producers.items():
            for e in batch:
                headers = TaggedRecord(version=version, event_time=e.t, watermark=wm,
                                       batch=self.batch).to_headers()
                self._send(producer, e.partition, event_key(e), value_of(e.n, e.t, version),
                           headers, self._on_ack(version, e))
            for p in range(self.partitions):
                self._send(producer, p, None, b"", heartbeat_headers(version, after, self.batch),
                           None)
        self.batch += 1

    def _on_ack(self, version: str, e: Event) -> Callable[[Any, Any], None]:
        log = self.logs[version]

        def acked(err: Any, _msg: Any) -> None:
            if err is not None:
                log.failed += 1
                return
            log.delivered.add(e.n)
            log.acked_at[e.partition].append(time.time())

        return acked

    def _send(self, producer: Producer, partition: int, key: bytes | None, value: bytes,
              headers: Any, on_delivery: Callable[[Any, Any], None] | None) -> None:
        while True:
            try:
                producer.produce(self.topic, value, key, partition=partition, headers=headers,
                                 on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:  # a fatal producer error: the job would restart
                raise RuntimeError(f"the emulated job's producer failed: {exc}") from exc
