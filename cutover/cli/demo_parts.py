"""The demo's moving parts: the processes it starts (each in its own process group, always
cleaned up, including the versions its rollouts started), the order feed, its router settings,
and waiting on the route."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cutover.cli.cluster import target_of
from cutover.cli.errors import CliError
from cutover.cli.orders import EventSpec, Order, make_orders
from cutover.control.routes import RouteView, StateReader
from cutover.demo_broker import free_port
from cutover.rollout.journal import RolloutRecord

ROUTE = "totals"
PARTITIONS = 2


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Processes:
    """Every process the demo starts, each in its own process group, always cleaned up."""

    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})})
        log.close()
        return self.procs[name].pid

    def check(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise CliError(f"{name} exited with code {p.returncode}; see "
                               f"{self.logs / (name + '.log')}", 1)

    def forget(self, name: str) -> None:
        """A process stopped by someone else (a rollout's stop command): reap it."""
        p = self.procs.pop(name, None)
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)

    def stop(self, name: str, grace: float = 20.0) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        stop_group(p.pid, grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name, grace=5.0)


def stop_group(pgid: int, grace: float = 20.0) -> None:
    """SIGTERM to a process group, SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class OrderFeed(threading.Thread):
    """Writes generated orders at a steady rate: event time advances 250 ms per order."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.orders = make_orders(EventSpec(seed=2026, count=rate * 900, customers=12,
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

    def written(self) -> list[Order]:
        return self.orders[: self.sent]


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


class Route:
    """The demo route as the operator commands see it (one reader, kept open)."""

    def __init__(self, config: Path) -> None:
        self.reader = StateReader(target_of(argparse.Namespace(config=str(config),
                                                               bootstrap=None)),
                                  ROUTE, status_tail=None, control_tail=None)
        self.rollouts: list[RolloutRecord] = []

    def view(self) -> RouteView:
        v = self.reader.refresh()[ROUTE]
        self.rollouts.extend(v.rollout_log)
        return v

    def close(self) -> None:
        self.reader.close()

    def min_watermarks(self, versions: tuple[str, ...]) -> dict[str, int | None]:
        """Each version's smallest watermark over all partitions (None until all have one)."""
        v = self.view()
        out: dict[str, int | None] = {}
        for version in versions:
            wms = [ps.watermarks.get(version) for ps, *_ in v.partitions.values()]
            known = [wm for wm in wms if wm is not None]
            out[version] = (min(known) if len(known) == len(wms) == PARTITIONS else None)
        return out

    def wait(self, procs: Processes, done: Callable[[], bool], what: str,
             timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            procs.check()
            if done():
                return
            time.sleep(1)
        raise CliError(f"timed out waiting for {what}; see the logs in {procs.logs}", 1)

    def settle(self, quiet_for: float = 4.0, timeout: float = 60.0) -> None:
        """Wait until the router has forwarded what the jobs wrote (counters stop moving)."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            c = self.view().counters.model_dump()
            if c != last:
                last, since = c, time.monotonic()
            elif time.monotonic() - since > quiet_for:
                return
            time.sleep(0.5)

    def stop_started_versions(self) -> None:
        """End every version a rollout started that still runs (the demo owns them all)."""
        for pid in {r.new_process.pid for r in self.rollouts if r.new_process is not None}:
            stop_group(pid, grace=10.0)
