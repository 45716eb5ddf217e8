"""One measured round of :mod:`tests.bench.compare_checkouts`, run with ``PYTHONPATH`` set to
the checkout under test: the router or the pass-through loop over an existing raw topic.

Prints one JSON line: wall records/s and the process's CPU time per raw record (every thread,
librdkafka's included), from the first record until the last is delivered (the router's: its
batch durable, router_clock). CPU per record barely moves with
the machine's load (measured: 4.55-4.75 us for the same loop at load 6-8, where its records/s
ranged 57k-135k), so two checkouts can be compared on a shared machine.

Usage: PYTHONPATH=CHECKOUT python tests/bench/checkout_round.py router|passthrough BOOTSTRAP RAW
       OUT CONTROL STATUS TOTAL STATE_DIR
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.settings import parse_settings
from router.worker.datapath import DataPath
from router.worker.gc_pause import batch_gc_pause
from tests.bench.passthrough import pass_batch
from tests.bench.test_router_bench import EVENTS, PARTITIONS

# This file's own helpers, read from beside it: the checkout on PYTHONPATH may predate them.
_clock = importlib.util.spec_from_file_location("router_clock",
                                                Path(__file__).with_name("router_clock.py"))
assert _clock is not None and _clock.loader is not None
router_clock = importlib.util.module_from_spec(_clock)
_clock.loader.exec_module(router_clock)
# ... and this checkout's topic admin (older checkouts keep it elsewhere).
_admin = importlib.util.spec_from_file_location(
    "topic_admin", Path(__file__).resolve().parents[2] / "cutover" / "topic_admin.py")
assert _admin is not None and _admin.loader is not None
topic_admin = importlib.util.module_from_spec(_admin)
_admin.loader.exec_module(topic_admin)

# The pass-through loop's prefetch, as router.base.kafka_io.PREFETCH (not imported: older checkouts
# lack it); the same in every checkout's round.
PREFETCH = {"queued.max.messages.kbytes": 16 * 1024, "fetch.queue.backoff.ms": 20,
            "fetch.max.bytes": 8 * 1024 * 1024}

# The two loops below repeat the router benchmark's (tests/bench/test_router_bench.py) with a
# CPU clock around them: this file runs against older checkouts, whose benchmark returns no CPU.


def passthrough(bootstrap: str, raw: str, out: str, total: int) -> tuple[float, float]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pt-{out}",
                  "enable.auto.commit": False, **PREFETCH})
    c.assign([TopicPartition(raw, p, 0) for p in range(PARTITIONS)])
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10000})
    n = 0
    t0 = c0 = 0.0
    while n < total:
        msgs = c.consume(20_000, 0.05)
        if msgs and not t0:
            t0, c0 = time.monotonic(), time.process_time()
        with batch_gc_pause():
            n += pass_batch(p, out, msgs)
            p.flush(60)
            if msgs:
                c.commit(asynchronous=True)
            del msgs
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    c.close()
    return wall, cpu


def router(bootstrap: str, raw: str, out: str, control: str, status: str,
           state: str) -> tuple[float, float]:
    settings = parse_settings({
        "bootstrap": bootstrap, "control_topic": control, "status_topic": status,
        "group_id": f"bench-{out}", "state_dir": state, "http_port": None,
        "kafka": {"session.timeout.ms": 6000, **PREFETCH},   # older checkouts: as now
        "routes": [{"name": "bench", "inputs": [raw], "output": out}]})
    engine = DataPath(settings, "bench")
    def decided() -> int:
        s = 0
        for o in list(engine.owned.values()):
            c = o.router.counters
            s += c.forwarded + c.duplicates + c.dead_lettered + sum(c.suppressed.values())
        return s

    # from the first consumed records until every data record is decided (heartbeats are not
    # decisions) and that batch is durable
    clock = router_clock.RouterClock(engine, decided, 2 * EVENTS)
    th = threading.Thread(target=engine.run, daemon=True)
    th.start()
    t0, c0 = clock.started()
    t1, c1 = clock.durable()
    wall, cpu = t1 - t0, c1 - c0
    forwarded = sum(o.router.counters.forwarded for o in engine.owned.values())
    engine.stop()
    th.join(30)
    if forwarded != EVENTS:
        raise SystemExit(f"router forwarded {forwarded} records, expected {EVENTS}")
    return wall, cpu


def main(argv: list[str]) -> None:
    mode, bootstrap, raw, out, control, status, total_s, state = argv
    total = int(total_s)
    topic_admin.create_topics(bootstrap, {out: PARTITIONS, f"{out}.dlq": PARTITIONS})
    if mode == "router":
        wall, cpu = router(bootstrap, raw, out, control, status, state)
    else:
        wall, cpu = passthrough(bootstrap, raw, out, total)
    print(json.dumps({"mode": mode, "per_s": total / wall, "cpu_us": cpu / total * 1e6}))


if __name__ == "__main__":
    main(sys.argv[1:])
