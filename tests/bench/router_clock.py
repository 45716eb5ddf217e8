"""Where the router's clock starts and stops in the throughput benchmarks.

It starts at the router's first consumed records, as the pass-through loop's starts at its first
non-empty consume. What comes before (joining the group, taking the partitions over, the first
checkpoints: ~80 ms on the test broker) is start-up, in neither figure.

It stops once the batch that decided the last record is durable: its end (checkpoints, output
produced and delivered) done and, with transactions, its commits complete (they finish while
the worker consumes the next batch), as the loop's stops after its last flush, once its output
is delivered. Through `da8ea13` it stopped at the last decision, which left the router's last
batch end out of its figure and not the loop's (its last batch's end and commits: 15-20 ms of a
1.2-1.7 s run, measured on the router benchmark's data).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


class Durable:
    """Notes the clocks when the batch in which ``decided()`` reached ``total`` is durable (see
    above). Make it before the engine runs."""

    def __init__(self, engine: DataPath, decided: Callable[[], int], total: int) -> None:
        self.at: tuple[float, float] | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._left = 0
        handle = engine._handle
        armed = False

        def arm(msgs: list[Any]) -> None:
            nonlocal armed
            if not armed:
                armed = True
                watch(engine)
            handle(msgs)

        def watch(engine: DataPath) -> None:
            end = engine._end        # made by the engine's run(), before its first batch
            assert end is not None
            complete = end.complete

            def completing() -> bool:
                last = self.at is None and self._left == 0 and decided() >= total
                out = complete()
                if last:
                    ended = end._ended
                    futures = [] if ended is None or ended.commits is None \
                        else ended.commits.futures
                    self._left = len(futures)
                    if not futures:
                        self._note()
                    for f in futures:
                        f.add_done_callback(lambda _f: self._one_done())
                return out

            end.complete = completing  # type: ignore[method-assign]

        engine._handle = arm  # type: ignore[method-assign]

    def _one_done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._note()

    def _note(self) -> None:
        self.at = (time.monotonic(), time.process_time())
        self._done.set()

    def wait(self, timeout: float = 300.0) -> tuple[float, float]:
        """(monotonic, process CPU) seconds once that batch is durable."""
        if not self._done.wait(timeout) or self.at is None:
            raise TimeoutError(f"the router's last batch was not durable in {timeout:.0f} s")
        return self.at
