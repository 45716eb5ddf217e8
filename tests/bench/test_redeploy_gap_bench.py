"""Output gap of a cutover against a stop-and-restart redeploy of the same Spark job
(``make bench``).

Real PySpark (local mode, the Spark tests' session settings) runs the example enrichment job
under ``cutover tag`` on a steady order stream; a consumer notes when each output record
arrives. In one run:

* cutover (B): blue runs, green starts from the beginning of the input and catches up, then
  ``cutover switch --at auto``, ``cutover wait`` for CLEAR_TO_TEARDOWN and blue is stopped;
  the figure is the largest arrival gap on the router's output topic around the switch;
* redeploy (A): the running job (green) is stopped with SIGTERM and started again on the same
  checkpoint while the input keeps flowing; the figure is the largest arrival gap on the job's
  own output topic (what its consumers see without a router) from the stop until it runs again.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.cli import main as cutover_main
from cutover.cli.orders import EventSpec, make_orders
from spark_tagger.partitioner import partition_for
from tests.bench.report import load_line, record
from tests.bench.support import (
    Child,
    create_route_topics,
    largest_gap,
    router_settings,
    start_router,
)

pytestmark = [pytest.mark.bench, pytest.mark.spark, pytest.mark.broker]

RATE = 50                 # input orders per second; event time runs 10x wall time
PARTITIONS = 2
CATCH_UP_MS = 30_000      # green within 3 s (wall) of blue counts as caught up
RUN_ON_S = 8.0            # keep measuring this long after each change
JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def _spark_support() -> ModuleType:
    """tests/spark/spark_test_support.py (the Spark tests' session settings)."""
    name = "spark_test_support"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "spark" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


class Feed(threading.Thread):
    """Orders at a steady RATE, event time 250 ms apart (up to 2 s out of order)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.orders = make_orders(EventSpec(seed=5, count=RATE * 900, customers=12,
                                            step_ms=250, max_disorder_ms=2_000))
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_event = threading.Event()

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        start = time.monotonic()
        for i, o in enumerate(self.orders):
            if self.stop_event.is_set():
                break
            delay = start + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            p.produce(self.topic, o.value, o.key,
                      partition=partition_for(o.key, None, PARTITIONS))
            p.poll(0)
        p.flush(10)


class Arrivals(threading.Thread):
    """Follows the raw and the output topic: arrival times of data records, and each
    version's watermark per partition (from data and heartbeats)."""

    def __init__(self, bootstrap: str, raw: str, output: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.raw, self.output = bootstrap, raw, output
        self.data: dict[tuple[str, str], list[float]] = {}  # (topic, version) -> arrivals
        self.watermarks: dict[str, dict[int, int]] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"gap-{uuid.uuid4()}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        c.assign([TopicPartition(t, p, 0) for t in (self.raw, self.output)
                  for p in range(PARTITIONS)])
        while not self.stop_event.is_set():
            for m in c.consume(500, 0.05):
                now = time.monotonic()
                if m.error():
                    continue
                h = {k: v.decode() for k, v in m.headers() or [] if v is not None}
                version = h.get("bg.version", "?")
                if m.topic() == self.raw and h.get("bg.watermark"):
                    self.watermarks.setdefault(version, {})[m.partition()] = int(
                        h["bg.watermark"])
                if h.get("bg.kind", "data") == "data":
                    self.data.setdefault((m.topic(), version), []).append(now)
        c.close()

    def min_watermark(self, version: str) -> int | None:
        wms = self.watermarks.get(version, {})
        return min(wms.values()) if len(wms) == PARTITIONS else None

    def times(self, topic: str, version: str | None = None) -> list[float]:
        return sorted(t for (tp, v), ts in list(self.data.items()) for t in ts
                      if tp == topic and version in (None, v))

    def count_after(self, topic: str, version: str, since: float) -> int:
        return sum(1 for t in self.data.get((topic, version), []) if t > since)


def _wait(what: str, pred: Callable[[], bool], timeout: float, *children: Child) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        for child in children:
            assert child.alive(), f"{child.proc.args[:4]} exited:\n{child.tail()}"
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}:\n" +
                         "\n".join(c.tail(15) for c in children))


@dataclass(frozen=True)
class Gap:
    largest_s: float         # in the window around the change
    steady_largest_s: float  # in a window of normal running before it (micro-batch rhythm)


def _gap(times: list[float], start: float, end: float, steady: tuple[float, float]) -> Gap:
    largest, _at = largest_gap(times, start, end)
    steady_largest, _at = largest_gap(times, *steady)
    return Gap(round(largest, 2), round(steady_largest, 2))


def test_cutover_gap_vs_redeploy_gap(bootstrap: str, tmp_path: Path) -> None:
    support = _spark_support()
    tag = uuid.uuid4().hex[:8]
    orders, raw, out = f"gap-orders-{tag}", f"gap-raw-{tag}", f"gap-out-{tag}"
    control, status = f"gap-ctl-{tag}", f"gap-st-{tag}"
    create_route_topics(bootstrap, PARTITIONS, output=out, control=control, status=status,
                        others=(orders, raw))
    config = router_settings(tmp_path / "router.yaml", bootstrap, route="gap", inputs=[raw],
                             output=out, control=control, status=status,
                             state_dir=tmp_path / "state", group=f"gap-{tag}",
                             dedup={"identity": "record", "retention_ms": 3_600_000})
    cfg = ["--config", str(config)]
    assert cutover_main(["plan", "init", "--route", "gap", "--primary", "blue", *cfg]) == 0

    def job(version: str, script: str, log: str) -> Child:
        argv = support.tag_command(version, JOBS / script, [
            "--bootstrap", bootstrap, "--input", orders, "--output", raw,
            "--checkpoint", str(tmp_path / f"ck-{version}")], ["--quiet"])
        return Child(argv, tmp_path / log, env=support.spark_env(), cwd=support.REPO)

    feed = Feed(bootstrap, orders)
    seen = Arrivals(bootstrap, raw, out)
    children: list[Child] = []
    t0 = time.monotonic()
    try:
        feed.start()
        seen.start()
        router = start_router(config, tmp_path / "router.log")
        children.append(router)
        blue = job("blue", "enrich_orders.py", "blue.log")
        children.append(blue)
        _wait("blue's output", lambda: len(seen.times(out, "blue")) > RATE * 3, 240, blue,
              router)
        green = job("green", "enrich_orders_green.py", "green.log")
        children.append(green)

        def caught_up() -> bool:
            b, g = seen.min_watermark("blue"), seen.min_watermark("green")
            return b is not None and g is not None and g >= b - CATCH_UP_MS

        _wait("green to catch up", caught_up, 240, blue, green, router)
        time.sleep(3)  # a few batches of both side by side: the steady state
        # -- B: cutover -----------------------------------------------------------------------
        t_switch = time.monotonic()
        assert cutover_main(["switch", "--route", "gap", "--to", "green", "--at", "auto",
                             "--deadline", "+3m", *cfg]) == 0
        assert cutover_main(["wait", "--route", "gap", "--for", "clear-to-teardown",
                             "--timeout", "3m", *cfg]) == 0
        t_clear = time.monotonic()
        blue.stop()
        t_blue_gone = time.monotonic()
        time.sleep(RUN_ON_S)
        t_b_end = time.monotonic()
        # -- A: redeploy (stop, start again on the same checkpoint) --------------------------
        t_stop = time.monotonic()  # SIGTERM
        green.stop()
        green2 = job("green", "enrich_orders_green.py", "green-restarted.log")
        children.append(green2)
        _wait("the restarted job's output", lambda: seen.count_after(raw, "green", t_stop) > 0,
              240, green2, router)
        t_back = min(t for t in seen.times(raw, "green") if t > t_stop)
        time.sleep(RUN_ON_S)
        t_a_end = time.monotonic()
    finally:
        feed.stop_event.set()
        for child in reversed(children):
            child.stop()
        seen.stop_event.set()
        seen.join(10)

    before = (t_switch - 20, t_switch)  # steady state, both jobs running
    cut = _gap(seen.times(out), t_switch - 5, t_b_end, before)
    redeploy = _gap(seen.times(raw, "green"), t_stop - 5, t_a_end,
                    (t_blue_gone, t_b_end))
    redeploy_routed = _gap(seen.times(out), t_stop - 5, t_a_end, (t_blue_gone, t_b_end))
    print(f"\noutput gap, enrich_orders.py under cutover tag, {RATE} orders/s, local[2]; "
          f"{load_line()}")
    print(f"  cutover:  largest gap on the router's output {cut.largest_s:.2f} s "
          f"(switch -> CLEAR_TO_TEARDOWN {t_clear - t_switch:.1f} s, blue stopped then; "
          f"largest in the 20 s before the switch {cut.steady_largest_s:.2f} s)")
    print(f"  redeploy: largest gap on the job's output {redeploy.largest_s:.2f} s "
          f"(SIGTERM -> first record of the restarted job {t_back - t_stop:.1f} s; largest "
          f"before the stop {redeploy.steady_largest_s:.2f} s; seen through the router "
          f"{redeploy_routed.largest_s:.2f} s)")
    print(f"  redeploy gap / cutover gap = {redeploy.largest_s / cut.largest_s:.1f}x "
          f"(whole run {time.monotonic() - t0:.0f} s)")
    record("redeploy_gap", {
        "rate": RATE, "cutover_gap_s": cut.largest_s, "redeploy_gap_s": redeploy.largest_s,
        "redeploy_gap_through_router_s": redeploy_routed.largest_s,
        "switch_to_clear_s": round(t_clear - t_switch, 2),
        "stop_to_first_output_s": round(t_back - t_stop, 2),
        "steady_largest_gap_s": cut.steady_largest_s,
        "ratio": round(redeploy.largest_s / cut.largest_s, 2)})
    assert cut.largest_s > 0 and redeploy.largest_s > 0
