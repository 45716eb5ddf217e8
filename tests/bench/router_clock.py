"""Where the router's clock starts in the throughput benchmarks: at its first consumed records,
as the pass-through loop's starts at its first non-empty consume. What comes before (joining the
group, taking the partitions over, the first checkpoints: ~80 ms on the test broker) is
start-up, in neither figure."""

from __future__ import annotations

import threading
import time
from typing import Any

from router.datapath import DataPath


class FirstRecords:
    """Notes the clocks when ``engine`` first decides a consumed batch."""

    def __init__(self, engine: DataPath) -> None:
        self.at: tuple[float, float] | None = None
        self._seen = threading.Event()
        handle = engine._handle  # the per-record path it runs (compiled or interpreted)

        def first(msgs: list[Any]) -> None:
            if self.at is None:
                self.at = (time.monotonic(), time.process_time())
                self._seen.set()
            handle(msgs)

        engine._handle = first  # type: ignore[method-assign]

    def wait(self, timeout: float = 120.0) -> tuple[float, float]:
        """(monotonic, process CPU) seconds at the first consumed records."""
        if not self._seen.wait(timeout) or self.at is None:
            raise TimeoutError(f"the router consumed nothing in {timeout:.0f} s")
        return self.at
