"""Child processes and router settings shared by the end-to-end benchmarks: a router worker,
a pass-through loop and Spark jobs all run as separate processes, as they do in production."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testground.brokers import create_topics
from tests.children import VENV_BIN, Child, RouterChild

__all__ = ["Child", "RouterChild"]

HERE = Path(__file__).resolve().parent


def cutover_exe() -> str:
    return str(VENV_BIN / "cutover")


def create_route_topics(bootstrap: str, partitions: int, *, output: str, control: str,
                        status: str, others: tuple[str, ...] = ()) -> None:
    """A route's topics for a benchmark: ``others`` (raw, baselines' outputs), the output and
    its dead-letter topic with ``partitions`` each; control (compacted) and status with one."""
    create_topics(bootstrap, {**dict.fromkeys(others, partitions), output: partitions,
                              f"{output}.dlq": partitions, control: 1, status: 1},
                  compacted=[control])


def router_settings(path: Path, bootstrap: str, *, route: str, inputs: list[str], output: str,
                    control: str, status: str, state_dir: Path, group: str,
                    kafka: dict[str, Any] | None = None, **route_extra: Any) -> Path:
    """Write a router settings file: one route, short group sessions, status every 0.5 s."""
    path.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": control, "status_topic": status,
        "group_id": group, "state_dir": str(state_dir), "http_port": None,
        "status_interval_s": 0.5,
        "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **(kafka or {})},
        "routes": [{"name": route, "inputs": inputs, "output": output,
                    "dead_letter": f"{output}.dlq", **route_extra}],
    }))
    return path


def start_router(config: Path, log: Path) -> RouterChild:
    """``cutover router --config FILE``; returns once it owns its partitions."""
    child = RouterChild(config, log, args=("--loglevel", "info"))
    child.wait_for_line("took over partitions", 90)
    return child


def start_passthrough(bootstrap: str, raw: str, out: str, log: Path,
                      fetch_wait_ms: int | None = None) -> Child:
    """The confluent-kafka pass-through loop (tests/bench/passthrough.py); returns once ready."""
    extra = [str(fetch_wait_ms)] if fetch_wait_ms else []
    child = Child([sys.executable, str(HERE / "passthrough.py"), bootstrap, raw, out, *extra],
                  log)
    child.wait_for_line("ready", 60)
    return child


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def largest_gap(stamps: Sequence[float], start: float, end: float) -> tuple[float, float]:
    """Largest gap between consecutive stamps (sorted) whose later one is in [start, end],
    and where it began."""
    best, at = 0.0, start
    for a, b in itertools.pairwise(stamps):
        if start <= b <= end and b - a > best:
            best, at = b - a, a
    return best, at
