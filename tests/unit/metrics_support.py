"""The metric families a deployment can scrape, read from what is exported (not from a list):
a router worker's /metrics as router.worker.app serves it (the status board, the watchdog's
progress, the nudger and the dedup stores' memory) and a rollout's `--metrics-port`."""

from __future__ import annotations

import re
import threading

from rollout_support import T0, record

from cutover.rollout.journal import CompareSummary
from cutover.rollout.metrics import prometheus as rollout_prometheus
from router.dedup.memory import StoreMemory
from router.worker.orphans import Nudger
from router.worker.status_publisher import StatusBoard
from router.worker.watchdog import Progress


def exported_families() -> dict[str, str]:
    """Every family's name -> its type, from the ``# TYPE`` lines of the exported text."""
    board = StatusBoard("w", routes={"r": 1}, plans={}, partitions=lambda r: {},
                        publish=lambda r, v: None, interval_s=1.0)
    board.tick()
    text = (board.prometheus() + Progress(stall_after_s=30.0).prometheus()
            + StoreMemory().prometheus() + idle_nudger().prometheus()
            + rollout_prometheus(record(compare=CompareSummary(
                old="blue", new="green", partitions={}, ranges={}, max_diff=0.0)), T0))
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


def idle_nudger() -> Nudger:
    """A worker's nudger that has nudged nothing yet (its metric at zero)."""
    return Nudger({"group.id": "g"}, "ckpt", threading.Event())


def series_names(families: dict[str, str]) -> set[str]:
    """The names a query may use: each family, and a histogram's _bucket, _sum and _count."""
    return set(families) | {f"{name}_{part}" for name, kind in families.items()
                            if kind == "histogram" for part in ("bucket", "sum", "count")}
