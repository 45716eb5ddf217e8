"""Router workers as real processes: ``cutover router --config FILE --instance-id ID``.

Each worker has its own settings file (its own ``state_dir`` and ``http_port``, as two workers
on one host must) in the same consumer group, and is started so that the kernel kills it if
the soak dies. Everything else is the router's defaults. The pool samples each process's
resident memory (RSS) from ``/proc``, and supervises the workers as Kubernetes would: a worker
that exited is started again, and so is one whose ``/health`` has failed for
``LIVENESS_FAILURE_S`` (a liveness probe's period times its failure threshold, 10 s x 3).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cutover.child_process import dies_with_parent
from cutover.demo_broker import free_port
from tests.children import VENV_BIN, Child

LIVENESS_FAILURE_S = 30.0
LIVENESS_INITIAL_DELAY_S = 60.0


@dataclass(frozen=True)
class RouteTopics:
    route: str
    raw: str
    output: str
    dead_letter: str
    control: str
    status: str
    group: str


# The workers' store caches (store_memory), small enough that they are full minutes into the run:
# the defaults (64 MiB each) fill over hours at the soak's rate, and memory that fills a bounded
# cache is not growth. Flat RSS then means nothing else grows (docs/decisions/016).
STORE_CACHE_BYTES = 8 << 20


@dataclass(frozen=True)
class WorkerMetrics:
    """What a worker's ``/metrics`` says of its memory and partitions."""

    stores_mb: float    # the stores' block cache and memtables
    filters_mb: float   # the stores' front filters
    partitions: int     # raw partitions it owns (one consumer-lag series each)


@dataclass
class RssSample:
    at: float       # wall clock, seconds
    pid: int
    rss_mb: float
    stores_mb: float | None = None   # the stores' block cache and memtables, from /metrics
    threads: int | None = None       # the process's threads
    anon_mb: float | None = None     # of rss_mb: anonymous memory (the heaps)
    file_mb: float | None = None     # of rss_mb: mapped files (libraries, RocksDB's files)
    filters_mb: float | None = None  # the stores' front filters, from /metrics
    partitions: int | None = None    # raw partitions it owned, from /metrics


@dataclass
class Worker:
    instance_id: str
    config: Path
    state_dir: Path
    log: Path
    http_port: int
    child: Child | None = None
    started_at: float = 0.0
    unhealthy_since: float | None = None
    retired: bool = False   # removed from the group on purpose: not restarted
    rss: list[RssSample] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.child.proc.pid if self.child is not None and self.child.alive() else None


def healthy(port: int) -> bool:
    """Whether the worker's ``/health`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return int(r.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def worker_metrics(port: int) -> WorkerMetrics | None:
    """The worker's memory and partitions from its ``/metrics``; None when it does not answer
    within a second."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    stores = filters = 0.0
    partitions = 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("cutover_store_block_cache_bytes", "cutover_store_write_buffer_bytes"):
            stores += float(value)
        elif name == "cutover_store_filter_bytes":
            filters += float(value)
        elif name.startswith("cutover_consumer_lag_records{"):
            partitions += 1
    return WorkerMetrics(stores_mb=round(stores / (1 << 20), 1),
                         filters_mb=round(filters / (1 << 20), 1), partitions=partitions)


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` in MiB (``VmRSS``), None when it is gone."""
    return _mb(pid, "VmRSS")


def thread_count(pid: int) -> int | None:
    return _status_field(pid, "Threads")


def _mb(pid: int, name: str) -> float | None:
    """A memory figure of ``/proc/<pid>/status`` in MiB, to 0.1; None when it is gone."""
    value = _status_field(pid, name)
    return None if value is None else round(value / 1024, 1)


def _status_field(pid: int, name: str) -> int | None:
    """A number from ``/proc/<pid>/status`` (its first word), None when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class WorkerPool:
    """The router workers of one route; ``root`` holds their settings, state and logs."""

    def __init__(self, root: Path, bootstrap: str, topics: RouteTopics,
                 retention_ms: int | None = None) -> None:
        """``retention_ms``: the route's ``dedup.retention_ms``, the router's default if None."""
        self.root = root
        self.retention_ms = retention_ms
        self.bootstrap = bootstrap
        self.topics = topics
        self.workers: dict[str, Worker] = {}
        self._serial = 0

    def live(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.pid is not None]

    def add(self) -> Worker:
        """A new worker with the next instance id, started."""
        self._serial += 1
        iid = f"{self.topics.route}-w{self._serial}"
        state = self.root / f"state-{iid}"
        config = self.root / f"{iid}.yaml"
        t = self.topics
        port = free_port()
        config.write_text(yaml.safe_dump({
            "bootstrap": self.bootstrap, "control_topic": t.control, "status_topic": t.status,
            "group_id": t.group, "state_dir": str(state), "http_port": port,
            "store_memory": {"block_cache_bytes": STORE_CACHE_BYTES,
                             "write_buffer_bytes": STORE_CACHE_BYTES},
            "routes": [{"name": t.route, "inputs": [t.raw], "output": t.output,
                        "dead_letter": t.dead_letter,
                        **({"dedup": {"retention_ms": self.retention_ms}}
                           if self.retention_ms is not None else {})}],
        }))
        w = Worker(iid, config, state, self.root / f"{iid}.log", port)
        self.workers[iid] = w
        self.start(w)
        return w

    def start(self, w: Worker) -> None:
        cmd = [str(VENV_BIN / "cutover"), "router", "--config", str(w.config),
               "--instance-id", w.instance_id]
        with w.log.open("a") as f:
            f.write(f"==== soak: started at {time.strftime('%H:%M:%S')}\n")
        w.child = Child(dies_with_parent(cmd), w.log)
        w.started_at = time.time()
        w.unhealthy_since = None

    def wait_started(self, w: Worker, timeout: float) -> bool:
        """Until ``w`` has taken or released partitions since its last start; False if not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = w.log.read_text(errors="replace").rsplit("==== soak: started", 1)[-1]
            if "took over partitions" in text or "released partitions" in text:
                return True
            if w.pid is None:
                return False
            time.sleep(0.3)
        return False

    def kill9(self, w: Worker) -> None:
        if w.child is not None:
            w.child.kill()

    def stop(self, w: Worker, grace: float = 30.0) -> int | None:
        """SIGTERM (a graceful leave), SIGKILL after ``grace``."""
        return w.child.stop(grace) if w.child is not None else None

    def signal(self, w: Worker, sig: signal.Signals) -> None:
        if w.child is not None and w.child.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.child.proc.pid, sig)

    def wipe_state(self, w: Worker) -> None:
        shutil.rmtree(w.state_dir, ignore_errors=True)

    def sample_rss(self) -> None:
        now = time.time()
        for w in self.live():
            pid = w.pid
            mb = rss_mb(pid) if pid is not None else None
            if pid is not None and mb is not None:
                m = worker_metrics(w.http_port)
                w.rss.append(RssSample(
                    now, pid, round(mb, 1), m.stores_mb if m else None, thread_count(pid),
                    anon_mb=_mb(pid, "RssAnon"), file_mb=_mb(pid, "RssFile"),
                    filters_mb=m.filters_mb if m else None,
                    partitions=m.partitions if m else None))

    def supervise(self) -> list[str]:
        """Restart, as a supervisor would, every worker that exited by itself or failed its
        liveness probe; one line each (why, and its last log line)."""
        out = []
        now = time.time()
        for w in self.workers.values():
            if w.retired or w.child is None:
                continue
            last = next((ln for ln in reversed(w.child.text().splitlines()) if ln.strip()), "")
            if not w.child.alive():
                out.append(f"{time.strftime('%H:%M:%S')} {w.instance_id} exited "
                           f"{w.child.proc.returncode} ({last[-200:]}); restarted")
                self.start(w)
                continue
            if now - w.started_at < LIVENESS_INITIAL_DELAY_S or healthy(w.http_port):
                w.unhealthy_since = None
                continue
            w.unhealthy_since = w.unhealthy_since or now
            if now - w.unhealthy_since >= LIVENESS_FAILURE_S:
                out.append(f"{time.strftime('%H:%M:%S')} {w.instance_id} failed its liveness "
                           f"probe (/health) for {now - w.unhealthy_since:.0f} s "
                           f"({last[-200:]}); killed and restarted")
                self.kill9(w)
                self.start(w)
        return out

    def stop_all(self) -> None:
        for w in self.workers.values():
            if w.child is not None and w.child.alive():
                self.signal(w, signal.SIGCONT)
                w.child.stop(10)
