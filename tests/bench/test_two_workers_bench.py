"""Two router workers on one route against one, on the same data: the consumer group splits
the 4 raw partitions between them. Run with ``make bench``; printed, not asserted.

Each worker is its own process (tests/bench/worker_progress.py; one Python process uses one
core for routing, whatever its threads). The raw topic is filled first (the router benchmark's
data, 300,000 events from each version); the workers start together, and the rate is measured
from the moment the group has settled (every partition owned, each worker owning some) until
every partition has been read to its end: raw records per second over that span.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from cutover.plan import CutoverPlan, Segment
from testground.brokers import create_topics
from tests.bench.report import load_line, record
from tests.bench.test_router_bench import BASE_T, PARTITIONS, _fill

pytestmark = [pytest.mark.bench, pytest.mark.broker]

EVENTS = 300_000
ROUNDS = 3
HERE = Path(__file__).resolve().parent


class Watched:
    """A worker process and its latest progress line."""

    def __init__(self, settings: dict[str, Any], worker_id: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE / "worker_progress.py"),
                                      json.dumps(settings), worker_id],
                                     stdout=subprocess.PIPE, text=True)
        self.last: dict[str, Any] = {"partitions": 0, "read": 0}
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            state = json.loads(line)
            if "read" in state:
                self.last = state

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _rate(bootstrap: str, raw: str, total: int, workers: int, tag: str, tmp: Path) -> float:
    out, ctl, st = f"two.out-{tag}", f"two.ctl-{tag}", f"two.st-{tag}"
    create_topics(bootstrap, {out: PARTITIONS, f"{out}.dlq": PARTITIONS, ctl: 1, st: 1})
    plan = CutoverPlan(route="two", epoch=1, segments=(
        Segment(from_event_time=None, primary="blue"),
        Segment(from_event_time=BASE_T + EVENTS * 5, primary="green")))
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(ctl, plan.to_json(), b"two")
    p.flush(10)
    settings = {"bootstrap": bootstrap, "control_topic": ctl, "status_topic": st,
                "group_id": f"two-{tag}", "http_port": None,
                "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
                "routes": [{"name": "two", "inputs": [raw], "output": out}]}
    procs = [Watched({**settings, "state_dir": str(tmp / f"w{i}")}, f"w{i}")
             for i in range(workers)]
    try:
        deadline = time.monotonic() + 120
        while not (sum(w.last["partitions"] for w in procs) == PARTITIONS
                   and all(w.last["partitions"] for w in procs)):
            assert time.monotonic() < deadline, "the group never settled"
            time.sleep(0.05)
        t0, read0 = time.monotonic(), sum(w.last["read"] for w in procs)
        while sum(w.last["read"] for w in procs) < total:
            assert time.monotonic() < deadline + 300, "the workers never read everything"
            time.sleep(0.05)
        return (total - read0) / (time.monotonic() - t0)
    finally:
        for w in procs:
            w.stop()


def test_two_workers_vs_one(bootstrap: str, tmp_path: Path) -> None:
    tag = str(int(time.time()))
    raw = f"two.raw-{tag}"
    create_topics(bootstrap, {raw: PARTITIONS})
    total = _fill(bootstrap, raw, EVENTS)
    rounds: list[tuple[float, float]] = []
    for r in range(ROUNDS):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        rates = {n: _rate(bootstrap, raw, total, n, f"{tag}-{r}-{n}", tmp_path / f"{r}-{n}")
                 for n in order}
        rounds.append((rates[1], rates[2]))
        print(f"\nround {r + 1}: one worker {rates[1]:,.0f} raw records/s, two workers "
              f"{rates[2]:,.0f} = {rates[2] / rates[1]:.2f}x", flush=True)
    one, two = sorted(rounds, key=lambda x: x[1] / x[0])[len(rounds) // 2]
    print(f"\ntwo workers vs one on {PARTITIONS} partitions: {two / one:.2f}x "
          f"({', '.join(f'{b / a:.2f}x' for a, b in rounds)}); {load_line()}", flush=True)
    record("two_workers", {"raw_records": total, "partitions": PARTITIONS,
                           "one_per_s": round(one), "two_per_s": round(two),
                           "ratio": round(two / one, 3),
                           "ratio_rounds": [round(b / a, 3) for a, b in rounds]})
    assert one > 0 and two > 0
