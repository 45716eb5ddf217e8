"""``cutover demo``: the whole story on an embedded broker, with real parts.

A generated order stream feeds two versions of an unmodified PySpark job (windowed totals per
customer; green rounds totals and adds the largest order) under the tagger; a router worker
sits between them and the output topic. When green has caught up, the demo switches with
``cutover switch --at auto``, waits with ``cutover wait`` for CLEAR_TO_TEARDOWN, stops blue,
runs on, and checks the output against a reference computed from the input alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cutover.broker import create_topics, free_port, wait_until_ready
from cutover.cli import CliError
from cutover.cli.cluster import target_of
from cutover.cli.demo_report import fmt, summarize
from cutover.cli.orders import EventSpec, make_orders
from cutover.tansu import EmbeddedBroker
from router.operator import RouteView, read_views

ROUTE = "totals"
WINDOW_MS = 10_000
PARTITIONS = 2
JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"
# Small-machine Spark settings: the default 200 shuffle partitions make each micro-batch of a
# stateful job take ~45 s on two cores; two partitions take well under a second.
SPARK_CONF = [f"--conf={kv}" for kv in (
    "spark.master=local[2]", "spark.sql.shuffle.partitions=2", "spark.ui.enabled=false",
    "spark.ui.showConsoleProgress=false", "spark.sql.session.timeZone=UTC")]


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole story on an embedded broker (about 3 minutes)")
    p.add_argument("--bootstrap", help="use this Kafka instead of starting an embedded broker")
    p.add_argument("--out", default="var/demo", help="where the timeline and logs go")
    p.add_argument("--rate", type=int, default=40, help="input orders per second")
    p.add_argument("--run-on", type=float, default=15.0,
                   help="seconds to keep running after blue is stopped")
    p.set_defaults(func=run)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Processes:
    """Every process the demo starts, each in its own process group, always cleaned up."""

    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})})
        log.close()

    def check(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise CliError(f"{name} exited with code {p.returncode}; see "
                               f"{self.logs / (name + '.log')}", 1)

    def stop(self, name: str, grace: float = 20.0) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name, grace=5.0)


class OrderFeed(threading.Thread):
    """Writes generated orders at a steady rate: event time advances 250 ms per order."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.orders = make_orders(EventSpec(seed=2026, count=rate * 600, customers=12,
                                            step_ms=250, max_disorder_ms=2_000))
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.sent = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        from spark_tagger.partitioner import partition_for

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "enable.idempotence": True})
        start = time.monotonic()
        for i, order in enumerate(self.orders):
            if self.stop_event.is_set():
                break
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.produce(self.topic, key=order.key, value=order.value,
                             partition=partition_for(order.key, None, PARTITIONS))
            producer.poll(0)
            self.sent = i + 1
        producer.flush(30)


def cutover(*args: str) -> int:
    """Run an operator command exactly as a user would type it."""
    from cutover.cli import main

    return main(list(args))


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cutover-demo-"))
    procs = Processes(logs)
    broker: EmbeddedBroker | None = None
    feed: OrderFeed | None = None
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    started = time.monotonic()
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            wait_until_ready(bootstrap)
            say(f"using Kafka at {bootstrap}")
        else:
            broker = EmbeddedBroker(log_path=logs / "broker.log").start()
            bootstrap = broker.bootstrap
            say(f"embedded broker up at {bootstrap}")
        topics = {"demo.orders": PARTITIONS, "demo.totals.raw": PARTITIONS,
                  "demo.totals": PARTITIONS, "demo.totals.dlq": PARTITIONS,
                  "demo.control": 1, "demo.status": 1}
        create_topics(bootstrap, topics, compacted=["demo.control"])
        config = write_settings(work / "router.yaml", bootstrap)
        cfg = ["--config", str(config)]

        feed = OrderFeed(bootstrap, "demo.orders", args.rate)
        feed.start()
        say(f"order feed: {args.rate} orders/s, event time 10 s per wall second")
        exe = str(Path(sys.executable).parent / "cutover")
        procs.start("router", [exe, "router", *cfg, "--loglevel", "warning"])
        if cutover("plan", "init", "--route", ROUTE, "--primary", "blue", *cfg) != 0:
            raise CliError("could not publish the first plan", 1)
        spark_env = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

        def job(version: str, script: str) -> None:
            procs.start(version, [
                exe, "tag", "--version", version, "--quiet", *SPARK_CONF, "--", str(JOBS / script),
                "--bootstrap", bootstrap, "--input", "demo.orders",
                "--output", "demo.totals.raw", "--checkpoint", str(work / f"ck-{version}")],
                env=spark_env)

        job("blue", "windowed_totals.py")
        say("blue (windowed_totals.py) started under the tagger")
        wait_progress(procs, cfg, lambda wm: wm.get("blue") is not None, "blue's first output",
                      timeout=120)
        job("green", "windowed_totals_green.py")
        say("green (windowed_totals_green.py) started from the beginning of the input")
        wait_progress(procs, cfg, caught_up, "green to catch up with blue", timeout=180)

        say("$ cutover switch --route totals --to green --at auto --deadline 3m")
        switched_at = time.time()
        if cutover("switch", "--route", ROUTE, "--to", "green", "--at", "auto",
                   "--deadline", "3m", *cfg) != 0:
            raise CliError("the switch was refused (see above)", 1)
        say("$ cutover wait --route totals --for clear-to-teardown --timeout 3m")
        if cutover("wait", "--route", ROUTE, "--for", "clear-to-teardown", "--timeout", "3m",
                   *cfg) != 0:
            raise CliError("the transition did not become clear to tear down", 1)
        cleared_at = time.time()
        say("CLEAR_TO_TEARDOWN: stopping blue")
        procs.stop("blue")
        say(f"running on green alone for {args.run_on:.0f} s")
        deadline = time.monotonic() + args.run_on
        while time.monotonic() < deadline:
            procs.check()
            time.sleep(1)
        feed.stop_event.set()
        feed.join(10)
        settle(cfg)
        procs.stop("green")
        final = view(cfg)
        if final is None:
            raise CliError(f"the router published no status; see {logs / 'router.log'}", 1)
        report = summarize(bootstrap, final, feed.orders[: feed.sent], switched_at, cleared_at,
                           out, partitions=PARTITIONS, window_ms=WINDOW_MS)
        procs.stop("router")
        say(f"done in {time.monotonic() - started:.0f} s")
        return 0 if report["lost"] == 0 and report["duplicated"] == 0 else 1
    except KeyboardInterrupt:
        say("interrupted: stopping everything the demo started")
        return 130
    finally:
        if feed is not None:
            feed.stop_event.set()
        procs.stop_all()
        if broker is not None:
            broker.stop()
        signal.signal(signal.SIGTERM, previous)


def write_settings(path: Path, bootstrap: str) -> Path:
    path.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": "demo.control", "status_topic": "demo.status",
        "group_id": "cutover-demo", "state_dir": str(path.parent / "router-state"),
        "http_port": free_port(), "status_interval_s": 1.0,
        "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        "routes": [{"name": ROUTE, "inputs": ["demo.totals.raw"], "output": "demo.totals",
                    "dead_letter": "demo.totals.dlq", "handover": "ordered",
                    "dedup": {"identity": "key_event_time", "retention_ms": 3_600_000}}],
    }))
    return path


def view(cfg: list[str]) -> RouteView | None:
    ns = argparse.Namespace(config=cfg[1], bootstrap=None)
    return read_views(target_of(ns), ROUTE).get(ROUTE)


def min_watermarks(v: RouteView | None) -> dict[str, int | None]:
    """Each version's smallest watermark over all partitions (None until all have one)."""
    out: dict[str, int | None] = {}
    if v is None or len(v.partitions) < PARTITIONS:
        return {}
    for version in ("blue", "green"):
        wms = [ps.watermarks.get(version) for ps, *_ in v.partitions.values()]
        known = [wm for wm in wms if wm is not None]
        out[version] = min(known) if len(known) == len(wms) else None
    return out


CATCH_UP_MS = 60_000  # event time runs 10x wall time: a few micro-batches behind is caught up


def caught_up(wm: dict[str, int | None]) -> bool:
    b, g = wm.get("blue"), wm.get("green")
    return b is not None and g is not None and g >= b - CATCH_UP_MS


def wait_progress(procs: Processes, cfg: list[str], done: Any, what: str,
                  timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        procs.check()
        wm = min_watermarks(view(cfg))
        line = "  ".join(f"{v}: {fmt(w)}" for v, w in wm.items()) or "no status yet"
        if line != last:
            say(f"  watermarks  {line}")
            last = line
        if done(wm):
            return
        time.sleep(2)
    raise CliError(f"timed out waiting for {what}; see the logs in {procs.logs}", 1)


def settle(cfg: list[str], quiet_for: float = 4.0, timeout: float = 60.0) -> None:
    """Wait until the router has forwarded what the jobs wrote (counters stop moving)."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        v = view(cfg)
        c = v.counters.model_dump() if v is not None else None
        if c != last:
            last, since = c, time.monotonic()
        elif time.monotonic() - since > quiet_for:
            return
        time.sleep(0.5)
