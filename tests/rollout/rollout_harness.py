"""What the rollout tests on the broker share: a route (topics, settings, a router worker), the
emulated jobs as processes, ``cutover rollout`` as a process, the journal, and the check of
the whole output against the timeline the rollout left."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cutover.rollout.journal import Phase, RolloutRecord, parse_record, route_of_key
from router.base.kafka_io import base_conf, read_to_end
from tests.children import VENV_BIN, Child
from tests.integration.harness import Env, RouterProcess
from tests.rollout.emulated_job import event_time

JOB = Path(__file__).resolve().parent / "emulated_job.py"


@dataclass
class RolloutRoute:
    """A route with a router worker and blue running, ready for ``cutover rollout``."""

    env: Env
    rate: float = 200.0          # events per second: event time runs at twice the wall clock
    count: int | None = None     # events each version emits in all, once the input is closed
    origin: int = field(default_factory=lambda: int(time.time() * 1000))
    children: list[Child] = field(default_factory=list)
    blue: Child | None = None

    @property
    def tmp(self) -> Path:
        return self.env.tmp

    def job_command(self, version: str, *extra: str) -> str:
        """The shell command of one emulated job version (its own checkpoint file)."""
        e = self.env
        argv = [sys.executable, str(JOB), "--bootstrap", e.bootstrap, "--topic",
                e.topic_for(version), "--partitions", str(e.partitions), "--version", version,
                "--origin", str(self.origin), "--rate", str(self.rate), "--close-file",
                str(self.close_file), "--checkpoint", str(self.tmp / f"{e.name}-ck-{version}"),
                *extra]
        return " ".join(_quote(a) for a in argv)

    @property
    def close_file(self) -> Path:
        return self.tmp / f"{self.env.name}-close"

    def close_input(self, after_s: float = 2.0) -> int:
        """End the input ``after_s`` seconds of events from now (every version stops there
        and closes its watermark); the number of events."""
        now = int((time.time() * 1000 - self.origin) / 1000 * self.rate)
        self.count = now + int(after_s * self.rate)
        self.close_file.write_text(str(self.count))
        return self.count

    def start_router(self) -> RouterProcess:
        router = RouterProcess(self.env)
        self.children.append(router)
        router.wait_started()
        assert self.env.cli_plan("init", "--route", self.env.route, "--primary", "blue") == 0
        return router

    def start_blue(self) -> Child:
        blue = Child(["/bin/sh", "-c", "exec " + self.job_command("blue")],
                     self.tmp / f"{self.env.name}-blue.log")
        self.children.append(blue)
        self.blue = blue
        return blue

    def stop_blue_command(self) -> str:
        """What ``--stop-old`` runs: SIGTERM to blue's process group."""
        assert self.blue is not None
        return f"kill -TERM -{self.blue.proc.pid}"

    def start_green(self, *extra: str) -> Child:
        green = Child(["/bin/sh", "-c", "exec " + self.job_command("green", *extra)],
                      self.tmp / f"{self.env.name}-green.log")
        self.children.append(green)
        return green

    def cli_child(self, argv: list[str], name: str) -> Child:
        child = Child([str(VENV_BIN / "cutover"), *argv], self.tmp / f"{self.env.name}-{name}.log")
        self.children.append(child)
        return child

    def rollout(self, *args: str, name: str = "rollout") -> Child:
        child = Child([str(VENV_BIN / "cutover"), "rollout", "--config", str(self.env.config),
                       "--route", self.env.route, "--interval", "0.3",
                       "--log-dir", str(self.tmp / f"{self.env.name}-logs"), *args],
                      self.tmp / f"{self.env.name}-{name}.log")
        self.children.append(child)
        return child

    def journal(self) -> list[RolloutRecord]:
        out = []
        for m in read_to_end(base_conf(self.env.bootstrap), self.env.status):
            if route_of_key(m.key()) == self.env.route:
                out.append(parse_record(m.value()))
        return out

    def wait_phase(self, phase: Phase, timeout: float, watch: Child | None = None
                   ) -> RolloutRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in reversed(self.journal()):
                if rec.phase is phase:
                    return rec
            if watch is not None and not watch.alive():
                raise AssertionError(f"the rollout exited {watch.proc.returncode} before "
                                     f"{phase.value}:\n{watch.tail(40)}")
            time.sleep(0.3)
        raise AssertionError(f"no {phase.value} within {timeout:.0f}s")

    def wait_exit(self, child: Child, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while child.alive() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not child.alive(), f"still running after {timeout:.0f}s:\n{child.tail(40)}"
        return child.proc.returncode

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop(grace=10)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def rolled_back_timeline(route: RolloutRoute, rec: RolloutRecord) -> Callable[[int, int], str]:
    """After a rollback: blue, green from the switch boundary up to each partition's pin (where
    the router had already given green event times), blue again from the pin."""
    pins = {p: ps.boundary for p, (ps, *_) in route.env.view().partitions.items()
            if ps.pinned and ps.boundary is not None}
    boundary = rec.switch_boundary

    def primary(p: int, t: int) -> str:
        pin = pins.get(p)
        return "green" if boundary is not None and pin is not None and boundary <= t < pin \
            else "blue"

    return primary


def check_output(route: RolloutRoute, primary: Callable[[int, int], str],
                 by_key: Callable[[int, int, bytes | None], str] | None = None) -> Counter[str]:
    """Close the input, then: every event, exactly once, on its partition, from
    ``primary(partition, event time)`` (or ``by_key(partition, event time, key)``, with a
    canary); returns the records per version."""
    if by_key is not None:
        primary_of = by_key
    else:
        def primary_of(p: int, t: int, _key: bytes | None) -> str:
            return primary(p, t)
    env = route.env
    count = route.close_input()
    env.wait_for(f"{count} output records", lambda: env.output_count() >= count, 120, 0.5)
    time.sleep(1.5)   # anything extra (a duplicate) would show up now
    seen: Counter[int] = Counter()
    wrong: list[str] = []
    versions: Counter[str] = Counter()
    for m in env.read(env.output):
        h = dict(m.headers() or [])
        i = json.loads(m.value())["id"]
        t, version = int(h["bg.event_time"]), h["bg.version"].decode()
        seen[i] += 1
        versions[version] += 1
        if t != event_time(i) or m.partition() != i % env.partitions:
            wrong.append(f"event {i}: t={t} partition {m.partition()}")
        elif version != primary_of(m.partition(), t, m.key()):
            wrong.append(f"event {i} (p{m.partition()}, t={t}) from {version}, expected "
                         f"{primary_of(m.partition(), t, m.key())}")
    lost = [i for i in range(count) if seen[i] == 0]
    dups = [(i, n) for i, n in seen.items() if n > 1]
    assert not lost, f"{len(lost)} events lost, e.g. {lost[:5]}"
    assert not dups, f"{len(dups)} events duplicated, e.g. {dups[:5]}"
    assert not wrong, f"{len(wrong)} wrong records, e.g. {wrong[:5]}"
    return versions


@contextlib.contextmanager
def started_route(bootstrap: str, tmp_path: Path) -> Iterator[RolloutRoute]:
    """A two-partition route with its router and blue running, blue's watermark seen; on exit
    everything stopped, the green a rollout started included (it runs on after DONE)."""
    r = RolloutRoute(Env(bootstrap, tmp_path, partitions=2))
    r.start_router()
    r.start_blue()
    r.env.wait_horizon(0, versions=("blue",))
    try:
        yield r
    finally:
        r.stop_all()
        for rec in r.journal()[-1:]:
            if rec.new_process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(rec.new_process.pid, signal.SIGTERM)
