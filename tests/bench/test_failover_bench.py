"""Router failover: the output gap consumers see when a router worker dies (``make bench``).

Tagged records flow at a steady rate through a route of 4 partitions; a consumer of the output
topic (``read_committed``) notes when each record arrives. A router worker is killed with
``kill -9`` mid-stream, in three set-ups, one after another in one run:

* **restart, same instance id**: one worker with ``--instance-id``; restarted at once with the
  same id (a Kubernetes StatefulSet pod, a systemd restart). Static membership gives it its
  partitions back without waiting for the dead member's session to expire;
* **standby**: two workers, each with its own instance id; the survivor takes the dead
  worker's partitions once the group notices (the consumer session timeout);
* **restart, no instance id, 45 s session** (the baseline, the router before static membership
  and its 6 s default session): one worker, restarted at once; the group first waits for the
  dead member's session (librdkafka's default, 45 s) to expire.

The figure is the largest arrival gap on any output partition from the kill until the stream
runs again there; every record must arrive exactly once.
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
from tests.bench.support import RouterChild, create_route_topics, largest_gap, router_settings

pytestmark = [pytest.mark.bench, pytest.mark.broker]

RATE = 1_000            # records/s
BEFORE_S = 8.0          # steady flow before the kill
AFTER_S = 60.0          # flow after the kill (longer than the baseline's session)
PARTITIONS = 4
SESSION_MS = 6_000      # the router's default consumer session timeout
BASELINE_SESSION_MS = 45_000  # librdkafka's default, which the router used before
BASE_T = 1_767_225_600_000


@dataclass(frozen=True)
class FailoverGap:
    setup: str
    gap_s: float          # largest output arrival gap after the kill
    gap_from_kill_s: float  # where the gap began, relative to the kill
    records: int
    lost: int
    duplicated: int


def _produce(bootstrap: str, topic: str, seconds: float, stop: threading.Event,
             sent: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    start = time.perf_counter()
    i = 0
    while not stop.is_set() and time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * RATE) + 1
        while i < due:
            t = BASE_T + i
            headers = TaggedRecord(version="blue", event_time=t, watermark=t - 1000,
                                   batch=i // RATE).to_headers()
            p.produce(topic, b"%d" % i, b"k%d" % i, partition=i % PARTITIONS, headers=headers)
            i += 1
        p.poll(0)
        time.sleep(0.002)
    p.flush(30)
    sent.append(i)


def _collect(bootstrap: str, topic: str, stop: threading.Event,
             arrivals: dict[int, list[float]]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fo-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    while not stop.is_set():
        for m in c.consume(1000, 0.05):
            if m.error() is None:
                arrivals.setdefault(int(m.value()), []).append(time.monotonic())
    c.close()


def _run(bootstrap: str, tmp: Path, setup: str) -> FailoverGap:
    tmp.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    raw, out = f"fo-raw-{tag}", f"fo-out-{tag}"
    control, status = f"fo-ctl-{tag}", f"fo-st-{tag}"
    create_route_topics(bootstrap, PARTITIONS, output=out, control=control, status=status,
                        others=(raw,))
    plan = CutoverPlan(route="fo", epoch=1, segments=(Segment(from_event_time=None,
                                                              primary="blue"),))
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(control, plan.to_json(), b"fo")
    p.flush(10)
    config = router_settings(tmp / "router.yaml", bootstrap, route="fo", inputs=[raw],
                             output=out, control=control, status=status,
                             state_dir=tmp / "state", group=f"fo-{tag}",
                             kafka={"session.timeout.ms": BASELINE_SESSION_MS
                                    if setup == "restart-no-id" else SESSION_MS})
    ids = {"restart-same-id": ["w1"], "standby": ["w1", "w2"], "restart-no-id": [None]}[setup]

    def worker(n: int, instance: str | None) -> RouterChild:
        args = ("--loglevel", "info", *(("--instance-id", instance) if instance else ()))
        child = RouterChild(config, tmp / f"w{n}.log", args=args)
        child.wait_started(90)
        return child

    workers = [worker(i, iid) for i, iid in enumerate(ids)]
    stop, sent, arrivals = threading.Event(), [], {}
    reader = threading.Thread(target=_collect, args=(bootstrap, out, stop, arrivals))
    writer = threading.Thread(target=_produce,
                              args=(bootstrap, raw, BEFORE_S + AFTER_S, stop, sent))
    reader.start()
    writer.start()
    try:
        time.sleep(BEFORE_S)
        victim = workers[0]
        killed_at = time.monotonic()
        victim.kill9()
        if setup != "standby":
            workers[0] = worker(len(workers) + 1, ids[0])
        writer.join(AFTER_S + 30)
        time.sleep(3.0)  # the last records drain
    finally:
        stop.set()
        writer.join(10)
        reader.join(10)
        for w in workers:
            w.stop()
    # Per partition: a consumer of the dead worker's partitions sees their gap, whatever the
    # other partitions do (record i went to partition i % PARTITIONS).
    gap, at = 0.0, killed_at
    for p in range(PARTITIONS):
        firsts = sorted(v[0] for i, v in arrivals.items() if i % PARTITIONS == p)
        g, a = largest_gap(firsts, killed_at, killed_at + AFTER_S)
        if g > gap:
            gap, at = g, a
    total = sent[0] if sent else 0
    return FailoverGap(setup, round(gap, 2), round(at - killed_at, 2), total,
                       lost=sum(1 for i in range(total) if i not in arrivals),
                       duplicated=sum(len(v) - 1 for v in arrivals.values()))


def test_failover_gap(bootstrap: str, tmp_path: Path) -> None:
    results = [_run(bootstrap, tmp_path / s, s)
               for s in ("restart-same-id", "standby", "restart-no-id")]
    print(f"\nrouter failover at {RATE:,} records/s, {PARTITIONS} partitions, consumer session "
          f"{SESSION_MS / 1000:.0f} s ({BASELINE_SESSION_MS / 1000:.0f} s for the baseline), "
          f"kill -9 after {BEFORE_S:.0f} s; {load_line()}")
    print(f"{'set-up':18} {'largest gap s':>14} {'from kill s':>12} {'records':>8} "
          f"{'lost':>5} {'dup':>5}")
    for r in results:
        print(f"{r.setup:18} {r.gap_s:>14.2f} {r.gap_from_kill_s:>12.2f} {r.records:>8} "
              f"{r.lost:>5} {r.duplicated:>5}")
    base = results[-1].gap_s
    for r in results[:-1]:
        print(f"{r.setup}: {base / r.gap_s:.1f}x shorter than the baseline"
              if r.gap_s else f"{r.setup}: no gap")
    record("failover_gap", {"rate": RATE, "partitions": PARTITIONS, "session_ms": SESSION_MS,
                            "results": [asdict(r) for r in results]})
    for r in results:
        assert r.lost == 0 and r.duplicated == 0, r
