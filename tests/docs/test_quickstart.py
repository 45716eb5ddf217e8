"""The README's quickstart, run: its settings file and each of its commands, in order, on the
suite's broker, so that the first fifteen minutes of a new user cannot fall behind the code.

What the test ground adds, and only that: the broker's address and a route name of its own in
place of the README's; topic, group and state names of its own in the settings (the broker is
shared by the whole suite); each `cutover tag` job replaced by an emulated tagged job writing
what the tagger writes (tests/rollout/emulated_job.py: a real PySpark job per version would
take minutes on two cores; tests/spark covers the tagger on real jobs); `--stop-old` stopping
that emulated blue; and short timings appended to `cutover rollout` (a later flag wins).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from cutover.cli import build_parser
from cutover.rollout.journal import parse_record, route_of_key
from router.base.kafka_io import base_conf, read_to_end
from tests.children import VENV_BIN, Child
from tests.rollout.rollout_harness import JOB

pytestmark = pytest.mark.broker

README = Path(__file__).resolve().parents[2] / "README.md"
CUTOVER = str(VENV_BIN / "cutover")


def quickstart() -> str:
    text = README.read_text()
    start = text.index("\n## Quickstart")
    return text[start:text.index("\n## ", start + 5)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def commands(text: str) -> list[list[str]]:
    """Every command of the section's shell blocks, continuation lines joined."""
    out = []
    for block in blocks(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                out.append(argv)
    return out


def test_the_quickstart_commands_are_cutover_commands_the_cli_takes() -> None:
    argvs = commands(quickstart())
    assert [a[1] for a in argvs] == ["init", "tag", "router", "status", "rollout"]
    parser = build_parser()
    for argv in argvs:
        assert argv[0] == "cutover"
        if argv[1] != "tag":   # tag's parser exists only with the tagger installed; run below
            parser.parse_args(argv[1:])
    assert "isolation.level=read_committed" in quickstart()


class Quickstart:
    """The README's section with the test ground's names, and the processes it starts."""

    def __init__(self, bootstrap: str, tmp: Path) -> None:
        self.bootstrap, self.tmp = bootstrap, tmp
        self.name = f"qs{uuid.uuid4().hex[:8]}"
        text = re.sub(r"\borders\b", self.name, quickstart())
        self.text = text.replace("kafka-1.example.com:9092", bootstrap)
        self.children: list[Child] = []
        self.origin = int(time.time() * 1000)
        self.partitions = 0
        self.config = tmp / "router.yaml"
        settings = yaml.safe_load(blocks(self.text, "yaml")[0])
        settings |= {"control_topic": f"{self.name}.control", "status_topic": f"{self.name}.status",
                     "group_id": f"{self.name}-router", "state_dir": str(tmp / "state"),
                     "http_port": None, "status_interval_s": 0.5,
                     "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}}
        self.config.write_text(yaml.safe_dump(settings))

    def argvs(self) -> list[list[str]]:
        return [[CUTOVER if a == "cutover" else str(self.config) if a == "router.yaml" else a
                 for a in argv] for argv in commands(self.text)]

    def job(self, tag_argv: list[str]) -> str:
        """The emulated job for ``cutover tag --version V -- JOB.py --out TOPIC``."""
        version = tag_argv[tag_argv.index("--version") + 1]
        topic = tag_argv[tag_argv.index("--out") + 1]
        return shlex.join([sys.executable, str(JOB), "--bootstrap", self.bootstrap, "--topic",
                           topic, "--partitions", str(self.partitions), "--version", version,
                           "--origin", str(self.origin), "--rate", "200", "--checkpoint",
                           str(self.tmp / f"ck-{version}")])

    def start(self, argv: list[str], name: str) -> Child:
        child = Child(argv, self.tmp / f"{name}.log")
        self.children.append(child)
        return child

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def qs(bootstrap: str, tmp_path: Path) -> Iterator[Quickstart]:
    q = Quickstart(bootstrap, tmp_path)
    try:
        yield q
    finally:
        for child in reversed(q.children):
            child.stop(grace=10)
        _stop_started_by_the_rollout(q)


def _stop_started_by_the_rollout(q: Quickstart) -> None:
    """Green, started by the rollout in a session of its own, runs on after DONE."""
    journal = [parse_record(m.value()) for m in read_to_end(base_conf(q.bootstrap),
                                                            f"{q.name}.status")
               if route_of_key(m.key()) == q.name]
    for rec in journal[-1:]:
        if rec.new_process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(rec.new_process.pid, signal.SIGTERM)


def test_the_quickstart_takes_a_job_to_its_first_routed_deploy(qs: Quickstart) -> None:
    init, tag, router, status, rollout = qs.argvs()

    done = qs.run(init)
    assert done.returncode == 0, done.stderr
    assert f"published the first plan of route {qs.name}: blue is primary" in done.stdout
    assert "--allow-principal User:cutover-router" in done.stdout
    qs.partitions = int(init[init.index("--partitions") + 1])

    blue = qs.start(["/bin/sh", "-c", "exec " + qs.job(tag[1:])], "blue")
    worker = qs.start(router, "router")
    deadline = time.monotonic() + 90
    while True:
        shown = qs.run(status)
        routed = "wm blue" in shown.stdout and "(no router)" not in shown.stdout
        if shown.returncode == 0 and routed:
            break
        assert worker.alive(), worker.tail(60)
        assert time.monotonic() < deadline, f"{shown.stdout}{shown.stderr}\n{worker.tail(40)}"
        time.sleep(1)

    start = rollout[rollout.index("--start") + 1]
    rollout[rollout.index("--start") + 1] = qs.job(shlex.split(start))
    rollout[rollout.index("--stop-old") + 1] = f"kill -TERM -{blue.proc.pid}"
    run = qs.start([*rollout, "--catch-up-lag", "2s", "--margin", "2s", "--deadline", "90s",
                    "--soak", "2s", "--interval", "0.3", "--log-dir", str(qs.tmp / "logs")],
                   "rollout")
    deadline = time.monotonic() + 150
    while run.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not run.alive(), run.tail(40)
    assert run.proc.returncode == 0, run.tail(40)
    assert "done in" in run.text() and "Traceback" not in run.text()
    assert not blue.alive(), "blue was not stopped by --stop-old"

    versions = _read_committed(qs.bootstrap, qs.name, qs.partitions)
    assert versions["blue"] > 0 and versions["green"] > 0, versions


def _read_committed(bootstrap: str, topic: str, partitions: int) -> Counter[str]:
    """The output as a consumer of step 6 reads it: each event once, from one version."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: Counter[int] = Counter()
    versions: Counter[str] = Counter()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
            c.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items()
            if end > 0):
        for m in c.consume(1000, timeout=1):
            if m.error() is None:
                seen[json.loads(m.value())["id"]] += 1
                versions[dict(m.headers() or [])["bg.version"].decode()] += 1
    c.close()
    dups = [i for i, n in seen.items() if n > 1]
    assert not dups, f"{len(dups)} events twice on the output, e.g. {dups[:5]}"
    return versions
