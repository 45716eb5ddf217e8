"""Latency the router adds (``make bench``): tagged records produced at a steady rate go through
a confluent-kafka pass-through loop and through a router worker at the same time (same broker,
same records); a consumer of both outputs measures each record's produce -> consume time.

Both are separate processes and batch the same way (consume up to 50 ms, produce, flush); the
router also writes each batch's checkpoint and waits for it before producing. Run twice: with
the consumers' default fetch.wait.max.ms (500 ms) and with 10 ms (set through the router's
``kafka:`` settings), which is what a latency-sensitive deployment would choose.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.headers import TaggedRecord
from cutover.plan import CutoverPlan, Segment
from tests.bench.report import load_line, record
from tests.bench.support import (
    create_route_topics,
    percentile,
    router_settings,
    start_passthrough,
    start_router,
)

pytestmark = [pytest.mark.bench, pytest.mark.broker]

RATE = 2_000          # records/s
SECONDS = 20
WARMUP_S = 2          # records of the first seconds are not counted
PARTITIONS = 4
BASE_T = 1_767_225_600_000


@dataclass(frozen=True)
class Latency:
    records: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


def _produce(bootstrap: str, topic: str, sent: list[int]) -> None:
    """RATE records/s for SECONDS; the value carries its produce time (ns since the epoch).

    linger.ms 20: with one or two records per produce request the test broker's latency grows
    with the number of batches a partition holds (measured: 40 ms to 4 s within 12 s)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    total = RATE * SECONDS
    start = time.perf_counter()
    i = 0
    while i < total:
        due = min(total, int((time.perf_counter() - start) * RATE) + 1)
        while i < due:
            t = BASE_T + i
            headers = TaggedRecord(version="blue", event_time=t, watermark=t - 1000,
                                   batch=i // RATE).to_headers()
            p.produce(topic, b"%d %d" % (i, time.time_ns()), b"k%d" % i,
                      partition=i % PARTITIONS, headers=headers)
            i += 1
        p.poll(0)
        time.sleep(0.0005)
    p.flush(30)
    sent.append(i)


def _collect(bootstrap: str, topics: list[str], expect: int, stop: threading.Event
             ) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> record number -> (produce-to-consume, produce-to-output-produce) latency in
    microseconds; the second is the output record's create time (ms), set by the pass-through's
    or the router's producer, so it excludes this consumer's own delay."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    got: dict[str, dict[int, tuple[int, int]]] = {t: {} for t in topics}
    while not stop.is_set() and min(len(v) for v in got.values()) < expect:
        for m in c.consume(1000, 0.05):
            now = time.time_ns()
            if m.error():
                continue
            i, sent = m.value().split(b" ")
            sent_us = int(sent) // 1000
            got[m.topic()][int(i)] = (now // 1000 - sent_us, m.timestamp()[1] * 1000 - sent_us)
    c.close()
    return got


def _summary(lat_us: dict[int, tuple[int, int]], which: int = 0) -> Latency:
    xs = sorted(v[which] / 1000 for i, v in lat_us.items() if i >= WARMUP_S * RATE)
    return Latency(len(xs), round(percentile(xs, 50), 2), round(percentile(xs, 90), 2),
                   round(percentile(xs, 99), 2), round(xs[-1], 2))


@pytest.mark.parametrize("fetch_wait_ms", [None, 10], ids=["fetch-wait-default", "fetch-wait-10ms"])
def test_router_added_latency(bootstrap: str, tmp_path: Path, fetch_wait_ms: int | None) -> None:
    tag = uuid.uuid4().hex[:8]
    raw, out_pt, out_r = f"lat-raw-{tag}", f"lat-pt-{tag}", f"lat-router-{tag}"
    control, status = f"lat-ctl-{tag}", f"lat-st-{tag}"
    create_route_topics(bootstrap, PARTITIONS, output=out_r, control=control, status=status,
                        others=(raw, out_pt))
    plan = CutoverPlan(route="lat", epoch=1, segments=(Segment(from_event_time=None,
                                                               primary="blue"),))
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(control, plan.to_json(), b"lat")
    p.flush(10)
    config = router_settings(tmp_path / "router.yaml", bootstrap, route="lat", inputs=[raw],
                             output=out_r, control=control, status=status,
                             state_dir=tmp_path / "state", group=f"lat-{tag}",
                             kafka={"fetch.wait.max.ms": fetch_wait_ms} if fetch_wait_ms else {})
    router = start_router(config, tmp_path / "router.log")
    passthrough = start_passthrough(bootstrap, raw, out_pt, tmp_path / "passthrough.log",
                                    fetch_wait_ms)
    try:
        total = RATE * SECONDS
        stop = threading.Event()
        result: dict[str, dict[int, tuple[int, int]]] = {}
        reader = threading.Thread(
            target=lambda: result.update(_collect(bootstrap, [out_pt, out_r], total, stop)))
        reader.start()
        sent: list[int] = []
        _produce(bootstrap, raw, sent)
        reader.join(60)
        stop.set()
        reader.join(10)
    finally:
        passthrough.stop()
        router.stop()

    assert sent == [total]
    assert len(result[out_pt]) == total, f"pass-through delivered {len(result[out_pt])}"
    assert len(result[out_r]) == total, f"router delivered {len(result[out_r])}"
    pt, rt = _summary(result[out_pt]), _summary(result[out_r])
    pt_hop, rt_hop = _summary(result[out_pt], 1), _summary(result[out_r], 1)
    fetch = f"fetch.wait.max.ms {fetch_wait_ms or 'default (500)'}"
    print(f"\nlatency at {RATE:,} records/s for {SECONDS} s ({PARTITIONS} partitions, first "
          f"{WARMUP_S} s not counted, {fetch}); {load_line()}")
    print(f"{'':42} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    rows = (("confluent pass-through, end to end", pt), ("router, end to end", rt),
            ("confluent pass-through, to its produce", pt_hop), ("router, to its produce", rt_hop))
    for name, s in rows:
        print(f"{name:42} {s.p50_ms:>8.1f} {s.p90_ms:>8.1f} {s.p99_ms:>8.1f} {s.max_ms:>8.1f}")
    print(f"router adds (end to end) p50 {rt.p50_ms - pt.p50_ms:+.1f} ms "
          f"({rt.p50_ms / pt.p50_ms:.2f}x), p99 {rt.p99_ms - pt.p99_ms:+.1f} ms "
          f"({rt.p99_ms / pt.p99_ms:.2f}x)")
    record(f"latency_fetch_wait_{fetch_wait_ms or 'default'}", {
        "rate": RATE, "seconds": SECONDS, "partitions": PARTITIONS,
        "fetch_wait_max_ms": fetch_wait_ms or 500,
        "passthrough": asdict(pt), "router": asdict(rt),
        "passthrough_to_produce": asdict(pt_hop), "router_to_produce": asdict(rt_hop),
        "added_p50_ms": round(rt.p50_ms - pt.p50_ms, 2),
        "added_p99_ms": round(rt.p99_ms - pt.p99_ms, 2)})
