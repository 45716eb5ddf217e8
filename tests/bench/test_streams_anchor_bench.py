"""The router against the tool a user would pick instead: a Kafka Streams application that does
the same job with ``processing.guarantee=exactly_once_v2`` (jvm/streams-router: drops
heartbeats and the version that is not primary by a fixed event-time boundary, dedups by the
same identity in a window store with the same retention, forwards key, value and headers).

One broker (Apache Kafka, the suite's), the same tagged backlog (both versions, heartbeats, a
switch in the middle, every tenth micro-batch replayed), at 4 and at 64 partitions; in each
round one router worker (``cutover router``, its default settings, transactions on) and the
Kafka Streams application (one stream thread, its default) each route the whole backlog into a
fresh output topic, in alternating order. Each is a separate process, seen from outside: from
its first output record visible to a ``read_committed`` consumer to its last, raw records per
second, and CPU seconds of its process (utime + stime from /proc) per raw record. Both outputs
are checked against the reference: every record once, from its primary, headers kept.

The goal is router / Kafka Streams >= 1.0x, in records per second and in records per CPU
second; the figures are printed with PASS or FAIL, never asserted (a benchmark asserts only
what makes its figure valid: nothing lost or duplicated).

    CUTOVER_BENCH_ANCHOR_EVENTS=N   events per version (default 500,000: 1.1M raw records)
    CUTOVER_BENCH_ANCHOR_ROUNDS=N   rounds at each partition count (default 3)
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from cutover.plan import CutoverPlan, Segment
from testground.brokers import BrokerUnderTest, create_topics
from tests.bench.report import load_line, record
from tests.bench.streams_anchor import (
    Backlog,
    Checked,
    Run,
    check_output,
    fill_backlog,
    start_streams_router,
    watch,
)
from tests.children import Child, RouterChild

pytestmark = [pytest.mark.bench, pytest.mark.broker]

EVENTS = int(os.environ.get("CUTOVER_BENCH_ANCHOR_EVENTS", "500000"))
ROUNDS = int(os.environ.get("CUTOVER_BENCH_ANCHOR_ROUNDS", "3"))
PARTITION_COUNTS = (4, 64)
GOAL = 1.0


@dataclass(frozen=True)
class Round:
    router: Run
    streams: Run

    @property
    def rate_ratio(self) -> float:
        return self.router.per_s / self.streams.per_s

    @property
    def cpu_ratio(self) -> float:
        """Records per CPU second, router / Kafka Streams."""
        return self.streams.cpu_us / self.router.cpu_us


def _timeout(backlog: Backlog) -> float:
    return 180 + backlog.raw_records / 2000


def _measured(bootstrap: str, backlog: Backlog, output: str, child: Child,
              started: float) -> tuple[Run, Checked]:
    try:
        run = watch(bootstrap, output, backlog.partitions, backlog, child.proc.pid, started,
                    child, _timeout(backlog))
    finally:
        child.stop()
    return run, check_output(bootstrap, output, backlog.partitions, backlog)


def _router(bootstrap: str, backlog: Backlog, name: str, tmp: Path) -> tuple[Run, Checked]:
    out, ctl, st = f"{name}.out", f"{name}.ctl", f"{name}.st"
    create_topics(bootstrap, {out: backlog.partitions, f"{out}.dlq": backlog.partitions,
                              ctl: 1, st: 1}, compacted=[ctl])
    plan = CutoverPlan(route="anchor", epoch=1, segments=(
        Segment(from_event_time=None, primary="blue"),
        Segment(from_event_time=backlog.boundary, primary="green")))
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(ctl, plan.to_json(), b"anchor")
    p.flush(10)
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": ctl, "status_topic": st, "group_id": name,
        "state_dir": str(tmp / f"{name}-state"), "http_port": None, "transactions": "on",
        "routes": [{"name": "anchor", "inputs": [backlog.topic], "output": out}]}))
    started = time.monotonic()
    child = RouterChild(config, tmp / f"{name}.log")
    return _measured(bootstrap, backlog, out, child, started)


def _streams(bootstrap: str, backlog: Backlog, name: str, tmp: Path) -> tuple[Run, Checked]:
    out = f"{name}.out"
    create_topics(bootstrap, {out: backlog.partitions, f"{out}.dlq": backlog.partitions})
    started = time.monotonic()
    child = start_streams_router(bootstrap, backlog, out, name, tmp / f"{name}-state",
                                 tmp / f"{name}.log")
    return _measured(bootstrap, backlog, out, child, started)


def _line(who: str, run: Run) -> str:
    return (f"{who} {run.per_s:,.0f} raw records/s, {run.cpu_us:.2f} us CPU per record, first "
            f"output {run.first_output_s:.1f} s after start, {run.threads} threads, peak RSS "
            f"{run.peak_rss_mb:.0f} MB")


def _verdict(x: float) -> str:
    return "PASS" if x >= GOAL else "FAIL"


def test_router_against_kafka_streams(broker: BrokerUnderTest, tmp_path: Path) -> None:
    if broker.kind == "tansu":
        pytest.skip("exactly_once_v2 needs a broker whose transactions work (Apache Kafka)")
    bootstrap = broker.bootstrap
    tag = str(int(time.time()))
    results, problems = [], []
    for partitions in PARTITION_COUNTS:
        raw = f"anchor.raw-{partitions}-{tag}"
        create_topics(bootstrap, {raw: partitions})
        backlog = fill_backlog(bootstrap, raw, EVENTS, partitions)
        print(f"\n{partitions} partitions: {backlog.raw_records:,} raw records, "
              f"{len(backlog.expected):,} to forward", flush=True)
        rounds: list[Round] = []
        for r in range(ROUNDS):
            runs = {"router": _router, "streams": _streams}
            got: dict[str, Run] = {}
            for who in runs if r % 2 == 0 else reversed(runs):
                name = f"anchor-{who}-{partitions}-{r}-{tag}"
                got[who], checked = runs[who](bootstrap, backlog, name, tmp_path)
                if checked != Checked(0, 0, 0, 0):
                    problems.append(f"{who}, {partitions} partitions, round {r + 1}: {checked}")
                shutil.rmtree(tmp_path / f"{name}-state", ignore_errors=True)
            rnd = Round(got["router"], got["streams"])
            rounds.append(rnd)
            print(f"round {r + 1}: {_line('router', rnd.router)}; "
                  f"{_line('Kafka Streams', rnd.streams)}; router / Kafka Streams: "
                  f"{rnd.rate_ratio:.2f}x records/s, {rnd.cpu_ratio:.2f}x records per CPU "
                  f"second", flush=True)
        mid = sorted(rounds, key=lambda x: x.rate_ratio)[len(rounds) // 2]
        rate = statistics.median(x.rate_ratio for x in rounds)
        cpu = statistics.median(x.cpu_ratio for x in rounds)
        print(f"{partitions} partitions, median of {ROUNDS} rounds: router / Kafka Streams "
              f"{rate:.2f}x records/s [{_verdict(rate)}, goal >= {GOAL:.1f}x], {cpu:.2f}x "
              f"records per CPU second [{_verdict(cpu)}]; {load_line()}", flush=True)
        results.append({
            "partitions": partitions, "raw_records": backlog.raw_records,
            "forwarded": len(backlog.expected),
            "router": asdict(mid.router), "streams": asdict(mid.streams),
            "router_per_s": round(statistics.median(x.router.per_s for x in rounds)),
            "streams_per_s": round(statistics.median(x.streams.per_s for x in rounds)),
            "router_cpu_us": round(statistics.median(x.router.cpu_us for x in rounds), 2),
            "streams_cpu_us": round(statistics.median(x.streams.cpu_us for x in rounds), 2),
            "rate_ratio": round(rate, 3), "cpu_ratio": round(cpu, 3),
            "rate_ratio_rounds": [round(x.rate_ratio, 3) for x in rounds],
            "cpu_ratio_rounds": [round(x.cpu_ratio, 3) for x in rounds]})
    record("streams_anchor", {"events": EVENTS, "rounds": ROUNDS, "goal": GOAL,
                              "checked": not problems, "by_partitions": results})
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
