"""Held records under a stalled old version: router RSS against records waiting, bounded
(``max_held`` 10,000, the default) vs effectively unbounded (``max_held`` above the records),
and the time to drain once the old version comes back. Run with ``make bench``; printed, not
asserted (CUTOVER_BENCH_HELD sets the new version's records, default 1,000,000).

The switch is in place, the old version (blue) has written everything below the boundary and
then goes silent; the new version (green) has written ``HELD`` records at or above it. A router
worker (tests/bench/worker_progress.py, its own process) reads them all: bounded, each partition
keeps 10,000 and pauses; unbounded, it keeps them all. Then blue's heartbeat passes the
boundary on every partition and the worker forwards every held record (bounded: reading the
raw partition again from the first record it did not keep).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from cutover.headers import TaggedRecord, heartbeat_headers
from cutover.plan import CutoverPlan, Segment
from testground.brokers import create_topics
from tests.bench.report import load_line, record

pytestmark = [pytest.mark.bench, pytest.mark.broker]

HELD = int(os.environ.get("CUTOVER_BENCH_HELD", "1000000"))
PARTITIONS = 4
BASE_T = 1_767_225_600_000
BOUNDARY = BASE_T + 1_000_000
BOUNDED = 10_000
HERE = Path(__file__).resolve().parent


class Filler:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                           "queue.buffering.max.messages": 2_000_000,
                           "batch.num.messages": 10000})

    def send(self, value: bytes, key: bytes | None, partition: int, hdrs: list) -> None:
        while True:
            try:
                self.p.produce(self.topic, value, key, partition=partition, headers=hdrs)
                return
            except BufferError:
                self.p.poll(0.05)

    def beat(self, version: str, wm: int, batch: int) -> None:
        for part in range(PARTITIONS):
            self.send(b"", None, part, heartbeat_headers(version, wm, batch))

    def fill(self) -> None:
        """Both versions below the boundary (1,000 records each), then green alone above it."""
        for v in ("blue", "green"):
            for i in range(1000):
                t = BASE_T + i * 10
                self.send(b'{"i": %d}' % i, b"k%d" % i, i % PARTITIONS,
                          TaggedRecord(version=v, event_time=t, watermark=BASE_T,
                                       batch=0).to_headers())
            self.beat(v, BASE_T + 9_990, 0)
        for i in range(HELD):
            t = BOUNDARY + i
            self.send(b'{"order": %d, "amount": %d, "by": "green"}' % (i, i % 997),
                      b"g%d" % i, i % PARTITIONS,
                      TaggedRecord(version="green", event_time=t, watermark=t - 1000,
                                   batch=1 + i // 1000).to_headers())
            if (i + 1) % 1000 == 0:
                self.beat("green", t - 1000, 1 + i // 1000)
        self.p.flush(120)


def _run(bootstrap: str, raw: str, tag: str, max_held: int, state: Path) -> dict[str, Any]:
    out, ctl, st = f"held.out-{tag}", f"held.ctl-{tag}", f"held.st-{tag}"
    create_topics(bootstrap, {out: PARTITIONS, f"{out}.dlq": PARTITIONS, ctl: 1, st: 1})
    plan = CutoverPlan(route="held", epoch=1, segments=(
        Segment(from_event_time=None, primary="blue"),
        Segment(from_event_time=BOUNDARY, primary="green")))
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(ctl, plan.to_json(), b"held")
    p.flush(10)
    settings = {"bootstrap": bootstrap, "control_topic": ctl, "status_topic": st,
                "group_id": f"held-{tag}", "state_dir": str(state), "http_port": None,
                "kafka": {"session.timeout.ms": 6000},
                "routes": [{"name": "held", "inputs": [raw], "output": out,
                            "max_held": max_held}]}
    child = subprocess.Popen([sys.executable, str(HERE / "worker_progress.py"),
                              json.dumps(settings)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines = iter(child.stdout)
    base = json.loads(next(lines))["rss"]
    total = 2 * 1000 + 2 * PARTITIONS + HELD + (HELD // 1000) * PARTITIONS
    peak, t_read = base, time.monotonic()
    curve: list[tuple[int, int]] = []
    try:
        for line in lines:  # until everything is read and held (or not kept)
            s = json.loads(line)
            peak = max(peak, s["rss"])
            curve.append((s["read"], s["rss"] - base))
            if s["partitions"] == PARTITIONS and s["read"] >= total:
                break
        read_s = time.monotonic() - t_read
        f = Filler(bootstrap, raw)
        f.beat("blue", BOUNDARY + HELD, 1)   # the old version comes back past the boundary
        f.p.flush(30)
        t0 = time.monotonic()
        for line in lines:
            s = json.loads(line)
            peak = max(peak, s["rss"])
            if s["forwarded"] >= 1000 + HELD:
                break
        drain_s = time.monotonic() - t0
    finally:
        child.terminate()
        child.wait(30)
    return {"max_held": max_held, "rss_growth_mb": round((peak - base) / 2**20, 1),
            "read_s": round(read_s, 1), "drain_s": round(drain_s, 1),
            "drain_per_s": round(HELD / drain_s),
            "curve": [(r, round(m / 2**20, 1)) for r, m in curve[:: max(1, len(curve) // 8)]]}


def test_held_bound_memory_and_drain(bootstrap: str, tmp_path: Path) -> None:
    tag = str(int(time.time()))
    raw = f"held.raw-{tag}"
    create_topics(bootstrap, {raw: PARTITIONS})
    Filler(bootstrap, raw).fill()
    runs = [_run(bootstrap, raw, f"{tag}-{mh}", mh, tmp_path / f"state-{mh}")
            for mh in (BOUNDED, HELD + 1)]
    for r in runs:
        kind = "bounded" if r["max_held"] == BOUNDED else "unbounded"
        print(f"\n{kind} (max_held {r['max_held']:,}): {HELD:,} records of the new version "
              f"waiting, router RSS +{r['rss_growth_mb']} MB (read in {r['read_s']} s); "
              f"drained {r['drain_s']} s after the old version's heartbeat "
              f"({r['drain_per_s']:,} records/s); RSS MB along the read: {r['curve']}",
              flush=True)
    bounded, unbounded = runs
    print(f"\nbounded/unbounded: RSS growth "
          f"{bounded['rss_growth_mb'] / max(unbounded['rss_growth_mb'], 0.1):.2f}x, drain "
          f"time {bounded['drain_s'] / max(unbounded['drain_s'], 0.1):.2f}x; {load_line()}")
    record("held_bound", {"held_records": HELD, "partitions": PARTITIONS,
                          "bounded": bounded, "unbounded": unbounded})
    assert bounded["drain_s"] > 0
