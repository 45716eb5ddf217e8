"""A route for ``cutover rollout`` with real PySpark jobs: the windowed example job's blue
running under ``cutover tag``, a seeded order stream written in flushed slices (the
conformance slice's writer), one router worker; and the check of the whole output against a
reference computed from the input alone, for the timeline the rollout left on each partition.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml

from cutover.cli.orders import Order
from cutover.control.routes import RouteView, Target, read_views
from cutover.rollout.journal import Phase, RolloutRecord, parse_record, route_of_key
from router.base.kafka_io import base_conf, read_to_end
from spark_tagger.partitioner import partition_for
from testground.brokers import create_topics, end_offsets
from tests.children import VENV_BIN, Child, RouterChild
from tests.conformance.spark_slice import (
    INPUT_PARTITIONS,
    PRELOAD,
    RAW_PARTITIONS,
    WINDOW_MS,
    InputWriter,
    as_verified,
    canonical,
    windowed_value,
)
from tests.spark.spark_test_support import JOBS, TagRun, spark_env, tag_command

VersionAt = Callable[[int, int], str]   # (partition, event time) -> the version expected
TAG_FLAGS = ("--quiet",)


class SparkRoute:
    """Topics, settings, a router worker, the input writer and blue, for one rollout."""

    def __init__(self, bootstrap: str, tmp: Path, seed: int) -> None:
        n = f"ro{uuid.uuid4().hex[:8]}"
        self.bootstrap, self.tmp, self.route = bootstrap, tmp, n
        self.input, self.raw, self.output = f"{n}.in", f"{n}.raw", f"{n}.out"
        self.dlq, self.control, self.status = f"{n}.dlq", f"{n}.control", f"{n}.status"
        create_topics(bootstrap, {self.input: INPUT_PARTITIONS, self.raw: RAW_PARTITIONS,
                                  self.output: RAW_PARTITIONS, self.dlq: RAW_PARTITIONS,
                                  self.control: 1, self.status: 1}, compacted=[self.control])
        self.config = tmp / f"{n}.yaml"
        self.config.write_text(yaml.safe_dump({
            "bootstrap": bootstrap, "control_topic": self.control, "status_topic": self.status,
            "group_id": f"g-{n}", "state_dir": str(tmp / f"state-{n}"), "http_port": None,
            "status_interval_s": 0.5,
            "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "routes": [{"name": n, "inputs": [self.raw], "output": self.output,
                        "dead_letter": self.dlq, "handover": "ordered",
                        "dedup": {"identity": "record", "retention_ms": 3_600_000}}],
        }))
        self.writer = InputWriter(bootstrap, self.input, seed)
        self.blue = TagRun(tag_command("blue", JOBS / "windowed_totals.py",
                                       self.job_args("blue"), TAG_FLAGS), tmp / "blue.log")
        self.children: list[Child] = []

    def job_args(self, version: str, *extra: str) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--input", self.input, "--output", self.raw,
                "--checkpoint", str(self.tmp / f"ck-{version}"), "--trigger", "1 second",
                *extra]

    def start(self) -> None:
        router = RouterChild(self.config, self.tmp / "router.log")
        self.children.append(router)
        router.wait_started(90)
        rc = self.cli("plan", "init", "--route", self.route, "--primary", "blue")
        assert self.wait_exit(rc, 60) == 0, rc.text()
        self.writer.write(PRELOAD)
        self.blue.start()
        self.writer.start()
        deadline = time.monotonic() + 600   # Spark's start is not the rollout's to wait for
        while not self._blue_everywhere():
            assert self.blue.proc.poll() is None, f"blue exited:\n{self.blue.tail()}"
            assert time.monotonic() < deadline, "blue has no watermark on every partition"
            time.sleep(1.0)

    def _blue_everywhere(self) -> bool:
        parts = self.view().partitions
        return len(parts) == RAW_PARTITIONS and all("blue" in ps.watermarks
                                                    for ps, *_ in parts.values())

    def green_command(self, job: str = "windowed_totals_green.py", *extra: str) -> str:
        return shlex.join(tag_command("green", JOBS / job, self.job_args("green", *extra),
                                      TAG_FLAGS))

    def stop_blue_command(self) -> str:
        return f"kill -TERM -{self.blue.proc.pid}"

    def cli(self, *args: str, name: str | None = None) -> Child:
        words = 2 if args[0] == "plan" else 1
        child = Child([str(VENV_BIN / "cutover"), *args[:words], "--config", str(self.config),
                       *args[words:]], self.tmp / f"{name or args[0]}.log", env=spark_env())
        self.children.append(child)
        return child

    def rollout(self, *args: str, name: str = "rollout") -> Child:
        return self.cli("rollout", "--route", self.route, "--interval", "0.5", "--log-dir",
                        str(self.tmp / "rollout-logs"), *args, name=name)

    def journal(self) -> list[RolloutRecord]:
        return [parse_record(m.value()) for m in read_to_end(base_conf(self.bootstrap),
                                                              self.status)
                if route_of_key(m.key()) == self.route]

    def wait_phase(self, phase: Phase, timeout: float, watch: Child) -> RolloutRecord:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [r for r in self.journal() if r.phase is phase]
            if found:
                return found[-1]
            assert watch.alive(), f"the rollout exited {watch.proc.returncode}:\n{watch.tail(40)}"
            time.sleep(1.0)
        raise AssertionError(f"no {phase.value} within {timeout:.0f}s:\n{watch.tail(20)}")

    @staticmethod
    def wait_exit(child: Child, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while child.alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not child.alive(), f"still running after {timeout:.0f}s:\n{child.tail(40)}"
        return child.proc.returncode

    def view(self) -> RouteView:
        t = Target(base_conf(self.bootstrap), self.control, self.status,
                   {self.route: RAW_PARTITIONS})
        return read_views(t, self.route)[self.route]

    def close_input(self) -> int:
        """Stop the writer and close every window; the jobs' final watermark."""
        self.writer.stop()
        return self.writer.close_windows()

    def stop_all(self) -> None:
        self.writer.stop()
        if self.blue.proc.poll() is None:
            self.blue.kill()
        for child in reversed(self.children):
            child.stop(grace=15)


def reference(orders: list[Order], final_wm: int, version_at: VersionAt
              ) -> dict[tuple[int, bytes, int], tuple[str, bytes]]:
    """(partition, customer, window end) -> (version, canonical value) for every window the
    final watermark closed, from the version ``version_at`` names for its partition and end."""
    groups: dict[tuple[str, int], list[Order]] = {}
    for o in orders:
        groups.setdefault((o.customer, o.ts - o.ts % WINDOW_MS), []).append(o)
    ref = {}
    for (customer, start), members in groups.items():
        end = start + WINDOW_MS
        if end > final_wm:
            continue
        p = partition_for(customer.encode(), None, RAW_PARTITIONS)
        version = version_at(p, end)
        ref[(p, customer.encode(), end)] = (version, canonical(windowed_value(
            version, customer, start, members)))
    return ref


def check_output(r: SparkRoute, version_at: VersionAt) -> Counter[str]:
    """Close the input, then every closed window exactly once, from ``version_at``'s version,
    with that version's value; nothing else. Returns the windows per version."""
    final_wm = r.close_input()
    ref = reference(r.writer.written, final_wm, version_at)
    deadline = time.monotonic() + 240
    # counted as a read_committed consumer sees them: with transactions on, end offsets also
    # count commit markers
    while sum(1 for _ in read_to_end(base_conf(r.bootstrap), r.output)) < len(ref):
        assert time.monotonic() < deadline, f"the output never reached {len(ref)} records"
        time.sleep(1.0)
    time.sleep(3.0)   # anything extra (a duplicate) would show up now
    seen: Counter[tuple[int, bytes, int]] = Counter()
    wrong: list[str] = []
    for m in read_to_end(base_conf(r.bootstrap), r.output):
        rec = as_verified("windowed_totals", m)
        t, version = int(rec.headers["bg.event_time"]), rec.headers["bg.version"].decode()
        k = (rec.partition, rec.key or b"", t)
        seen[k] += 1
        want = ref.get(k)
        if want is None:
            wrong.append(f"unexpected {k}")
        elif want != (version, rec.value):
            wrong.append(f"{k}: {version} {rec.value!r}, expected {want}")
    lost = [k for k in ref if not seen[k]]
    dups = [k for k, n in seen.items() if n > 1]
    assert not lost, f"{len(lost)} of {len(ref)} windows lost, e.g. {lost[:3]}"
    assert not dups, f"{len(dups)} windows duplicated, e.g. {dups[:3]}"
    assert not wrong, f"{len(wrong)} wrong records, e.g. {wrong[:3]}"
    assert sum(end_offsets(r.bootstrap, r.dlq).values()) == 0, "records were dead-lettered"
    return Counter(v for v, _ in ref.values())


def switch_timeline(boundary: int, pins: dict[int, int] | None = None) -> VersionAt:
    """Blue below the switch boundary, green from it, blue again from a partition's rollback
    pin (when there is one)."""
    def version_at(p: int, t: int) -> str:
        if t < boundary or (pins is not None and t >= pins[p]):
            return "blue"
        return "green"
    return version_at


def journal_lines(r: SparkRoute) -> str:
    return "\n".join(json.dumps({"phase": x.phase.value, "note": x.note[:200]})
                     for x in r.journal()[-8:])

