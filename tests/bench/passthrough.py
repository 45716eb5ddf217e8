"""A confluent-kafka pass-through loop (raw -> out, same key, value, headers and partition),
batched like the router's data path: consume up to 20,000 records or 50 ms, produce, flush,
commit, with the cyclic collector paused per batch. The baseline the router is measured
against.

Usage: python passthrough.py BOOTSTRAP RAW OUT [FETCH_WAIT_MS]
(prints "ready", runs until SIGTERM; FETCH_WAIT_MS sets the consumer's fetch.wait.max.ms)
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from router.base.kafka_io import PREFETCH
from router.worker.gc_pause import batch_gc_pause

BATCH = 20_000
POLL_S = 0.05


def pass_batch(producer: Producer, out: str, msgs: list[Message]) -> int:
    """Produce every consumed record to ``out`` (same key, value, headers and partition),
    waiting for queue space when it is full; returns how many."""
    n = 0
    for m in msgs:
        if m.error():
            continue
        while True:
            try:
                producer.produce(out, m.value(), m.key(), partition=m.partition(),
                                 headers=m.headers())
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
    return n


def forward_primary(producers: list[Producer], out: str, msgs: list[Message],
                    primary: bytes) -> int:
    """The transactional floor's batch (tests/bench/test_router_bench.py): produce the
    records whose version (the tagger's first header) is ``primary`` to ``out``, each through
    its partition's producer; heartbeats and the other version are dropped unread. Returns how
    many records were consumed."""
    n = 0
    for m in msgs:
        if m.error():
            continue
        n += 1
        h = m.headers()
        if not h or h[0][1] != primary:
            continue
        p = m.partition()
        producer = producers[p]
        while True:
            try:
                producer.produce(out, m.value(), m.key(), partition=p, headers=h)
                break
            except BufferError:
                producer.poll(0.05)
    return n


@dataclass(frozen=True)
class Measured:
    """One run: raw records/s (wall), and the process's CPU per raw record, every thread's
    (librdkafka's included), over the same window: the figure that moves least with the
    machine's load (tests.bench.checkout_round)."""

    per_s: float
    cpu_us: float


# The loops' output producer: the router's linger (5 ms), a queue that never fills here.
OUTPUT_PRODUCER = {"linger.ms": 5, "queue.buffering.max.messages": 1_000_000,
                   "batch.num.messages": 10000}


def assigned_consumer(bootstrap: str, raw: str, group: str, partitions: int) -> Consumer:
    """A consumer of every raw partition from its start, prefetching as the router does."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, **PREFETCH})
    c.assign([TopicPartition(raw, p, 0) for p in range(partitions)])
    return c


def passthrough_measured(bootstrap: str, raw: str, out: str, total: int,
                         partitions: int) -> Measured:
    """The loop over ``total`` raw records of ``raw`` (every partition from its start) into
    ``out``, in this process: its rate from its first consumed record to its last, and its CPU
    per record."""
    c = assigned_consumer(bootstrap, raw, f"pt-{raw}", partitions)
    p = Producer({"bootstrap.servers": bootstrap, **OUTPUT_PRODUCER})
    n = 0
    t0 = c0 = None
    while n < total:
        msgs = c.consume(20_000, 0.05)
        if msgs and t0 is None:
            t0, c0 = time.monotonic(), time.process_time()
        with batch_gc_pause():  # as the router's data path does
            n += pass_batch(p, out, msgs)
            p.flush(60)
            c.commit(asynchronous=True) if msgs else None
            del msgs
    assert t0 is not None and c0 is not None
    done = Measured(total / (time.monotonic() - t0), (time.process_time() - c0) / total * 1e6)
    c.close()
    return done


def run(bootstrap: str, raw: str, out: str, stop: threading.Event,
        fetch_wait_ms: int | None = None) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"passthrough-{raw}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **PREFETCH,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         **({"fetch.wait.max.ms": fetch_wait_ms} if fetch_wait_ms else {})})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000,
                         "acks": "all"})
    ready = threading.Event()
    consumer.subscribe([raw], on_assign=lambda _c, _p: ready.set())
    announced = False
    while not stop.is_set():
        msgs = consumer.consume(BATCH, POLL_S)
        if ready.is_set() and not announced:
            print("ready", flush=True)
            announced = True
        with batch_gc_pause():  # as the router's data path does
            pass_batch(producer, out, msgs)
            if msgs:
                producer.flush(60)
                consumer.commit(asynchronous=True)
            del msgs
    consumer.close()
    producer.flush(10)


if __name__ == "__main__":
    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    run(sys.argv[1], sys.argv[2], sys.argv[3], stop_event,
        int(sys.argv[4]) if len(sys.argv) > 4 else None)
