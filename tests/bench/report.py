"""Shared bits of the benchmarks: a JSON results file (``var/bench/results.json``, one section
per benchmark, replaced on each run) and the machine's load, printed with every figure."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "var" / "bench" / "results.json"


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def record(section: str, figures: dict[str, Any], path: Path = RESULTS) -> None:
    """Write (or replace) one benchmark's section in the results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[section] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": [round(x, 2) for x in load_average()],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **figures,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load_line() -> str:
    one, five, fifteen = load_average()
    note = " (measured under load)" if one > 2 else ""
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cpus{note}"
