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
from typing import Any, NamedTuple

from router.worker.datapath import DataPath


class Clock(NamedTuple):
    wall: float   # time.monotonic()
    cpu: float    # time.process_time(): every thread of the process


class RouterClock:
    """Notes the clocks at ``engine``'s first consumed batch (:meth:`started`) and once the
    batch in which ``decided()`` reached ``total`` is durable (:meth:`durable`). Make it before
    the engine runs: it wraps the engine's per-record path (compiled or interpreted) and, at
    its first batch, the engine's batch end."""

    def __init__(self, engine: DataPath, decided: Callable[[], int], total: int) -> None:
        self.start: Clock | None = None
        self.end: Clock | None = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._left = 0   # the last batch's commits still in flight
        self._decided, self._total = decided, total
        handle = engine._handle

        def first(msgs: list[Any]) -> None:
            if self.start is None:
                self._watch(engine)
                self.start = Clock(time.monotonic(), time.process_time())
                self._started.set()
            handle(msgs)

        engine._handle = first  # type: ignore[method-assign]

    def _watch(self, engine: DataPath) -> None:
        end = engine._parts.end   # made by the engine's run(), before its first batch
        complete = end.complete

        def completing() -> bool:
            last = self.end is None and self._left == 0 and self._decided() >= self._total
            out = complete()
            if last:
                futures = [f.commit for f in end.in_flight.values() if f.commit is not None]
                self._left = len(futures)
                if not futures:
                    self._note_end()
                for f in futures:
                    f.add_done_callback(lambda _f: self._one_committed())
            return out

        end.complete = completing  # type: ignore[method-assign]

    def _one_committed(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._note_end()

    def _note_end(self) -> None:
        self.end = Clock(time.monotonic(), time.process_time())
        self._done.set()

    def started(self, timeout: float = 120.0) -> Clock:
        """The clocks at the first consumed records."""
        if not self._started.wait(timeout) or self.start is None:
            raise TimeoutError(f"the router consumed nothing in {timeout:.0f} s")
        return self.start

    def durable(self, timeout: float = 300.0) -> Clock:
        """The clocks once the batch that decided the last record is durable."""
        if not self._done.wait(timeout) or self.end is None:
            raise TimeoutError(f"the router's last batch was not durable in {timeout:.0f} s")
        return self.end
