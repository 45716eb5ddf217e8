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
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cutover.broker import create_topics, free_port, wait_until_ready
from cutover.cli import CliError
from cutover.tansu import EmbeddedBroker

ROUTE = "totals"
WINDOW_MS = 10_000
PARTITIONS = 2
JOBS = Path(__file__).resolve().parents[1] / "examples" / "jobs"
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
        from spark_tagger.testing import EventSpec, make_orders

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
        report = summarize(bootstrap, cfg, feed, switched_at, cleared_at, out)
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


def view(cfg: list[str]) -> Any:
    from router.operator import read_views, target_of

    ns = argparse.Namespace(config=cfg[1], bootstrap=None)
    return read_views(target_of(ns), ROUTE).get(ROUTE)


def min_watermarks(v: Any) -> dict[str, int | None]:
    """Each version's smallest watermark over all partitions (None until all have one)."""
    out: dict[str, int | None] = {}
    if v is None or len(v.partitions) < PARTITIONS:
        return {}
    for version in ("blue", "green"):
        wms = [ps.watermarks.get(version) for ps, *_ in v.partitions.values()]
        out[version] = None if None in wms else min(wms)  # type: ignore[type-var]
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


def fmt(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%H:%M:%S", time.gmtime(ms / 1000))


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


@dataclass(frozen=True)
class Rec:
    """A record read back: what the summary and the timeline need."""

    value: bytes | None
    headers: dict[str, str]
    timestamp: float  # seconds

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


def read_all(bootstrap: str, topic: str) -> list[Rec]:
    from router.kafka_io import base_conf, read_to_end

    return [Rec(m.value(), {k: v.decode() for k, v in (m.headers() or []) if v is not None},
                m.timestamp()[1] / 1000)
            for m in read_to_end(base_conf(bootstrap), topic)]


def summarize(bootstrap: str, cfg: list[str], feed: OrderFeed, switched_at: float,
              cleared_at: float, out: Path) -> dict[str, Any]:
    from spark_tagger.partitioner import partition_for

    v = view(cfg)
    raw = read_all(bootstrap, "demo.totals.raw")
    output = read_all(bootstrap, "demo.totals")
    dlq = read_all(bootstrap, "demo.totals.dlq")
    plan = v.plan
    _, _, boundary = plan.transition
    bound_p = {p: ps.boundary if ps.boundary is not None else boundary
               for p, (ps, *_rest) in v.partitions.items()}
    final_wm = {p: ps.watermarks for p, (ps, *_rest) in v.partitions.items()}

    # The reference, from the input alone: every window of every customer.
    ref: dict[tuple[str, int], int] = Counter()
    for o in feed.orders[: feed.sent]:
        ref[(o.customer, o.ts // WINDOW_MS * WINDOW_MS + WINDOW_MS)] += 1
    expected: dict[tuple[str, int], str] = {}
    for (cust, end), _n in ref.items():
        p = partition_for(cust.encode(), None, PARTITIONS)
        version = "blue" if end < bound_p[p] else "green"
        if end < final_wm[p].get(version, -1):  # closed by that version's final watermark
            expected[(cust, end)] = version

    seen: Counter[tuple[str, int]] = Counter()
    wrong_version = wrong_value = 0
    by_version: Counter[str] = Counter()
    for r in output:
        body = json.loads(r.value)
        end = int(r.header("bg.event_time"))
        k = (body["customer"], end)
        seen[k] += 1
        ver = r.header("bg.version")
        by_version[ver] += 1
        if k in expected and expected[k] != ver:
            wrong_version += 1
        if body["orders"] != ref.get(k):
            wrong_value += 1
    lost = sum(1 for k in expected if k not in seen)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    raw_data = Counter(r.header("bg.version") for r in raw if r.header("bg.kind") != "heartbeat")
    stamps = sorted(r.timestamp for r in output)
    near = [b - a for a, b in itertools.pairwise(stamps)
            if switched_at - 30 <= b <= cleared_at + 30]
    # The same measure away from the switch (after the first output has settled), so the
    # gap around the switch can be compared with the job's own rhythm of micro-batches.
    settled = stamps[0] + 20 if stamps else 0.0
    elsewhere = [b - a for a, b in itertools.pairwise(stamps)
                 if b >= settled and not switched_at - 30 <= b <= cleared_at + 30]
    c = v.counters
    report = {
        "records_in": dict(raw_data), "forwarded": dict(by_version),
        "suppressed": c.suppressed, "duplicates_removed": c.duplicates,
        "dead_lettered": len(dlq), "expected": len(expected), "lost": lost,
        "duplicated": duplicated, "wrong_version": wrong_version, "wrong_value": wrong_value,
        "largest_gap_s": max(near, default=0.0),
        "largest_gap_elsewhere_s": max(elsewhere, default=0.0),
        "boundary": boundary, "pinned": bound_p,
        "switch_to_clear_s": cleared_at - switched_at,
    }
    png = out / "timeline.png"
    draw_timeline(png, output, raw, boundary)
    (out / "summary.json").write_text(json.dumps(report, indent=2, default=str))
    print()
    print("summary")
    print(f"  input orders written        {feed.sent}")
    print(f"  raw records in (data)       {fmt_counts(raw_data)}")
    print(f"  forwarded per version       {fmt_counts(by_version)}")
    print(f"  suppressed (non-primary)    {fmt_counts(c.suppressed)}")
    print(f"  duplicates removed          {c.duplicates}")
    print(f"  dead-lettered               {len(dlq)}")
    print(f"  boundary                    {boundary} ({fmt(boundary)} event time); per "
          f"partition {bound_p}")
    print(f"  switch -> CLEAR_TO_TEARDOWN {cleared_at - switched_at:.1f} s")
    print(f"  checked against reference   {len(expected)} windows expected: lost {lost}, "
          f"duplicated {duplicated}, wrong version {wrong_version}, wrong count {wrong_value}")
    print(f"  largest output gap          {report['largest_gap_s']:.2f} s around the switch, "
          f"{report['largest_gap_elsewhere_s']:.2f} s elsewhere (micro-batch rhythm)")
    print(f"  timeline                    {png}")
    print(f"  summary, logs               {out / 'summary.json'}, {out / 'logs'}")
    return report


def fmt_counts(c: Any) -> str:
    return ", ".join(f"{k}={n}" for k, n in sorted(dict(c).items())) or "0"


def draw_timeline(png: Path, output: list[Any], raw: list[Any], boundary: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"blue": "#1f77b4", "green": "#2ca02c"}
    t0 = min((int(r.header("bg.event_time")) for r in output), default=boundary)
    bucket = 60_000
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for r in output:
        t = int(r.header("bg.event_time"))
        counts[r.header("bg.version")][(t - t0) // bucket] += 1
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    buckets = sorted({b for c in counts.values() for b in c})
    bottom = [0] * len(buckets)
    for version, c in sorted(counts.items()):
        ys = [c.get(b, 0) for b in buckets]
        ax1.bar([b for b in buckets], ys, bottom=bottom, width=0.9, label=f"forwarded {version}",
                color=colours.get(version))
        bottom = [a + y for a, y in zip(bottom, ys, strict=True)]
    bx = (boundary - t0) / bucket
    for ax in (ax1, ax2):
        ax.axvline(bx, color="black", linestyle="--", linewidth=1, label="boundary")
    ax1.set_ylim(0, max(bottom, default=1) * 1.25)
    ax1.set_ylabel("windows forwarded per minute\nof event time")
    ax1.legend(loc="upper left", ncols=3)
    ax1.set_title("cutover demo: output by event time, coloured by the version it came from")
    wm: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in raw:
        w = r.header("bg.watermark")
        if w is not None:
            wm[r.header("bg.version")].append(((int(w) - t0) / bucket, r.timestamp))
    start = min((ts for pts in wm.values() for _, ts in pts), default=0)
    for version, pts in sorted(wm.items()):
        pts.sort(key=lambda p: p[1])
        ax2.plot([x for x, _ in pts], [ts - start for _, ts in pts], ".", markersize=2,
                 color=colours.get(version), label=f"{version} watermark")
    ax2.set_xlabel("event time (minutes from the first window)")
    ax2.set_ylabel("wall clock (s) when the\nwatermark was emitted")
    ax2.legend(loc="upper left", ncols=3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
