"""Test harness for the router on the real broker: topics, a router worker process, emulated
tagged jobs (headers as the tagger writes them, heartbeats to every partition), and the
exactly-once check of the whole output topic against a reference."""

from __future__ import annotations

import ast
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from cutover.cli import main as cutover_main
from cutover.control.routes import RouteView, Target, read_views
from cutover.headers import SRC, TaggedRecord, heartbeat_headers
from cutover.plan import CutoverPlan
from router.base.kafka_io import base_conf, read_to_end
from testground.brokers import create_topics, free_port
from tests.children import RouterChild

BASE_T = 1_767_225_600_000  # event times start here (ms)
STEP = 10                   # ms between consecutive events


@dataclass
class Env:
    """One route's topics and a settings file for router workers."""

    bootstrap: str
    tmp: Path
    partitions: int = 2
    handover: str = "ordered"
    per_version_inputs: bool = False
    retention_ms: int = 3_600_000
    http_port: int | None = None
    shadow: bool = False
    max_held: int | None = None
    transactions: str = "auto"
    name: str = field(default_factory=lambda: f"r{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        n = self.name
        self.route = n
        self.inputs = [f"{n}.blue", f"{n}.green"] if self.per_version_inputs else [f"{n}.raw"]
        self.output, self.dlq, self.shadow_topic = f"{n}.out", f"{n}.dlq", f"{n}.shadow"
        self.control, self.status = f"{n}.control", f"{n}.status"
        topics = {t: self.partitions for t in (*self.inputs, self.output, self.dlq,
                                                self.shadow_topic)}
        topics |= {self.control: 1, self.status: 1}
        create_topics(self.bootstrap, topics, compacted=[self.control])
        self.state_dir = self.tmp / f"state-{n}"
        self.config = self.write_config()

    def settings_dict(self, **over: Any) -> dict[str, Any]:
        d: dict[str, Any] = {
            "bootstrap": self.bootstrap, "control_topic": self.control,
            "status_topic": self.status, "group_id": f"g-{self.name}",
            "state_dir": str(self.state_dir), "http_port": self.http_port,
            "status_interval_s": 0.5, "transactions": self.transactions,
            "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "routes": [{"name": self.route, "inputs": self.inputs, "output": self.output,
                        "dead_letter": self.dlq, "handover": self.handover,
                        "dedup": {"identity": "record", "retention_ms": self.retention_ms},
                        **({"shadow": self.shadow_topic} if self.shadow else {}),
                        **({"max_held": self.max_held} if self.max_held else {})}],
        }
        d.update(over)
        return d

    def write_config(self, name: str = "router.yaml", **over: Any) -> Path:
        path = self.tmp / f"{self.name}-{name}"
        path.write_text(yaml.safe_dump(self.settings_dict(**over)))
        return path

    def topic_for(self, version: str) -> str:
        if not self.per_version_inputs:
            return self.inputs[0]
        return self.inputs[0] if version == "blue" else self.inputs[1]

    # -- operator ------------------------------------------------------------------------

    def cli(self, *args: str) -> int:
        return cutover_main([args[0], "--config", str(self.config), *args[1:]])

    def cli_plan(self, *args: str) -> int:
        return cutover_main(["plan", args[0], "--config", str(self.config), *args[1:]])

    def view(self) -> RouteView:
        t = Target(base_conf(self.bootstrap), self.control, self.status,
                   {self.route: self.partitions})
        return read_views(t, self.route)[self.route]

    def publish_raw_plan(self, value: bytes | None, key: bytes | None = None) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap})
        p.produce(self.control, value, self.route.encode() if key is None else key)
        assert p.flush(10) == 0

    def publish_plan(self, plan: CutoverPlan) -> None:
        self.publish_raw_plan(plan.to_json())

    def status_messages(self) -> list[dict[str, Any]]:
        return [json.loads(m.value()) for m in read_to_end(base_conf(self.bootstrap),
                                                            self.status)]

    def wait_for(self, what: str, pred: Callable[[], bool], timeout: float = 60.0,
                 interval: float = 0.3) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_horizon(self, at_least: int, timeout: float = 60.0,
                     versions: tuple[str, ...] = ()) -> RouteView:
        """Wait until every partition has routed up to ``at_least`` and, for each of
        ``versions``, has seen a heartbeat (watermarks come from heartbeats only, which the
        router may route a little after the data): what `cutover switch` checks."""
        box: list[RouteView] = []

        def ok() -> bool:
            v = self.view()
            box[:] = [v]
            hs = [ps.horizon or 0 for ps, *_ in v.partitions.values()]
            marks = all(ver in ps.watermarks for ps, *_ in v.partitions.values()
                        for ver in versions)
            return len(hs) == self.partitions and min(hs) >= at_least and marks

        self.wait_for(f"every partition's horizon >= {at_least} and watermarks of "
                      f"{list(versions)}", ok, timeout)
        return box[0]

    def output_count(self) -> int:
        """Records a read_committed consumer sees (end offsets also count transaction
        markers and aborted records)."""
        return sum(1 for _ in read_to_end(base_conf(self.bootstrap), self.output))

    def wait_output(self, n: int, timeout: float = 90.0) -> None:
        self.wait_for(f"{n} output records", lambda: self.output_count() >= n, timeout, 0.5)
        time.sleep(1.0)  # anything extra (a duplicate) would show up now

    def read(self, topic: str) -> list[Any]:
        return list(read_to_end(base_conf(self.bootstrap), topic))


class RouterProcess(RouterChild):
    """A router worker of an integration test's environment, logging into its directory."""

    def __init__(self, env: Env, config: Path | None = None, name: str = "w",
                 extra_env: dict[str, str] | None = None, args: Sequence[str] = ()) -> None:
        self.env = env
        self.config = config or env.config
        super().__init__(self.config, env.tmp / f"{env.name}-{name}-{uuid.uuid4().hex[:4]}.log",
                         extra_env, args)


# A worker's log line for each assignment it took over (router.worker.assignment).
TOOK = re.compile(r"took over partitions (\[[^\]]*\])")


def takeovers(router: RouterProcess) -> list[set[int]]:
    """The partitions of each assignment the worker took over, in order."""
    return [{p for _, p in ast.literal_eval(m.group(1))} for m in TOOK.finditer(router.text())]


@dataclass
class Event:
    i: int

    @property
    def t(self) -> int:
        return BASE_T + self.i * STEP

    @property
    def key(self) -> bytes:
        return f"k{self.i}".encode()


def events(start: int, stop: int) -> list[Event]:
    return [Event(i) for i in range(start, stop)]


class Job:
    """One tagged job version: writes data records and heartbeats like the tagger does."""

    def __init__(self, env: Env, version: str, lateness_ms: int = 0) -> None:
        self.env = env
        self.version = version
        self.topic = env.topic_for(version)
        self.lateness = lateness_ms
        self.max_t: int | None = None
        self.batch = 0
        self.producer = Producer({"bootstrap.servers": env.bootstrap, "linger.ms": 5,
                                  "queue.buffering.max.messages": 1_000_000})

    def value(self, e: Event) -> bytes:
        return json.dumps({"id": e.i, "t": e.t, "by": self.version}).encode()

    @property
    def watermark(self) -> int | None:
        return None if self.max_t is None else self.max_t - self.lateness

    def emit(self, evs: Iterable[Event], heartbeat: bool = True) -> None:
        """One micro-batch: the records (watermark = the batch's start watermark), then a
        heartbeat to every partition with the watermark after the batch."""
        wm = self.watermark
        for e in evs:
            headers = TaggedRecord(version=self.version, event_time=e.t, watermark=wm,
                                   batch=self.batch).to_headers()
            self._produce(e.key, self.value(e), e.i % self.env.partitions, headers)
            self.max_t = e.t if self.max_t is None else max(self.max_t, e.t)
        if heartbeat:
            self.heartbeat()
        self.batch += 1
        self.producer.flush(30)

    def heartbeat(self, watermark: int | None = None) -> None:
        wm = self.watermark if watermark is None else watermark
        for p in range(self.env.partitions):
            self._produce(None, b"", p, heartbeat_headers(self.version, wm, self.batch))
        self.producer.flush(30)

    def _produce(self, key: bytes | None, value: bytes, p: int, headers: Any) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition=p, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)


def produce_raw(env: Env, key: bytes, value: bytes, headers: Any, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": env.bootstrap})
    p.produce(env.inputs[0], value, key, partition=partition, headers=headers)
    assert p.flush(10) == 0


def check_output(env: Env, evs: list[Event], primary: Callable[[int, int], str]) -> list[Any]:
    """The whole output topic holds each event exactly once, from ``primary(partition, t)``,
    in the raw partition, with bg.src pointing at a record of that partition."""
    out = env.read(env.output)
    seen: Counter[tuple[bytes, int]] = Counter()
    wrong: list[str] = []
    want = {(e.key, e.t): e for e in evs}
    for m in out:
        h = dict(m.headers() or [])
        t = int(h["bg.event_time"])
        version = h["bg.version"].decode()
        seen[(m.key(), t)] += 1
        e = want.get((m.key(), t))
        if e is None:
            wrong.append(f"unexpected record {m.key()!r} t={t}")
            continue
        if m.partition() != e.i % env.partitions:
            wrong.append(f"{m.key()!r} in partition {m.partition()}")
        if version != primary(m.partition(), t):
            wrong.append(f"{m.key()!r} t={t} from {version}, expected "
                         f"{primary(m.partition(), t)}")
        src = h[SRC].decode().rsplit(":", 2)
        if int(src[1]) != m.partition() or src[0] not in env.inputs:
            wrong.append(f"{m.key()!r} bad bg.src {h[SRC]!r}")
        if json.loads(m.value())["by"] != version:
            wrong.append(f"{m.key()!r} value/header mismatch")
    dups = [(k, n) for k, n in seen.items() if n > 1]
    lost = [k for k in want if seen[k] == 0]
    assert not dups, f"{len(dups)} duplicated events, e.g. {dups[:5]}"
    assert not lost, f"{len(lost)} lost events, e.g. {lost[:5]}"
    assert not wrong, f"{len(wrong)} wrong records, e.g. {wrong[:5]}"
    assert len(out) == len(evs)
    return out


def run_cli_json(env: Env) -> dict[str, Any]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert env.cli("status", "--route", env.route, "--json") == 0
    return json.loads(buf.getvalue())[env.route]


__all__ = ["BASE_T", "STEP", "Env", "Event", "Job", "RouterProcess", "check_output", "events",
           "free_port", "produce_raw", "run_cli_json"]
