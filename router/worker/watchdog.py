"""Never alive and idle: a worker that owns partitions with input waiting decides records, or is
recovering, or exits (DESIGN.md, "Liveness").

Two judges, one clock. The data thread reports each step (:meth:`Progress.stepped`): a step that
decided records, or took partitions over, is progress; a step with nothing consumed while the
owned partitions have input waiting is not. After ``stall_after_s`` without progress while
input waits, the data thread itself is stalled: it raises :class:`router.base.errors.WorkerStalled`
and rebuilds its clients (router.worker.datapath). A data thread that does not come back from one
step at all (a client call that never returns) cannot raise anything: the watchdog thread sees the
step's age, reports the worker stalled, and after three times ``stall_after_s`` ends the
process with a sentence and a non-zero code, for its supervisor to restart it; a restarted
worker resumes from its checkpoints as after a kill -9. While the worker is stalled ``/health``
answers 503, so that a liveness probe restarts it too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from router.base.metrics import family_header

log = logging.getLogger("cutover.router")

# How often the watchdog thread looks at the data thread.
LOOK_EVERY_S = 1.0
# A step blocked for this many times ``stall_after_s`` ends the process.
EXIT_AFTER_STALLS = 3
# The exit code of a worker its watchdog ended (a supervisor restarts it).
EXIT_STALLED = 3


@dataclass
class Progress:
    """When the data thread last made progress, and the step it is in. Written by the data
    thread, read by the watchdog thread and the HTTP endpoints (plain floats: a torn read is a
    read of the previous value, which the next look corrects)."""

    stall_after_s: float
    clock: Callable[[], float] = time.monotonic
    last_progress: float = field(default=0.0)
    step_began: float | None = None
    stalled_since: float | None = None
    reason: str = ""
    rebuilds: int = 0
    stalls: int = 0

    def __post_init__(self) -> None:
        self.last_progress = self.clock()

    # -- the data thread --------------------------------------------------------------------

    def begin_step(self) -> None:
        self.step_began = self.clock()

    def stepped(self, progressed: bool) -> None:
        """A step ended; ``progressed``: it decided records or took partitions over."""
        now = self.clock()
        self.step_began = None
        if progressed:
            self.last_progress = now
            self._clear()

    def idle(self) -> None:
        """Nothing is waiting on the owned partitions (or none is owned): not a stall."""
        self.last_progress = self.clock()
        self._clear()

    def check_due(self) -> bool:
        """True when no progress was made for ``stall_after_s``: time to ask whether input is
        waiting (a query the data thread makes only then)."""
        return self.clock() - self.last_progress >= self.stall_after_s

    def stall(self, reason: str) -> None:
        """The data thread found itself stalled: reported until the next progress."""
        if self.stalled_since is None:
            self.stalled_since = self.clock()
            self.stalls += 1
        self.reason = reason

    def rebuilt(self) -> None:
        """The clients were rebuilt: the stall clock starts again (recovering is not idle)."""
        self.rebuilds += 1
        self.last_progress = self.clock()

    # -- the watchdog thread and the endpoints ------------------------------------------------

    def blocked_for(self) -> float:
        """How long the current step has lasted (0 between steps)."""
        began = self.step_began
        return 0.0 if began is None else self.clock() - began

    def look(self) -> bool:
        """The watchdog's look: True when the process must end (a step blocked for
        ``EXIT_AFTER_STALLS`` times ``stall_after_s``)."""
        blocked = self.blocked_for()
        if blocked >= self.stall_after_s:
            self.stall(f"one step of the data path has not returned for {blocked:.0f}s")
        return blocked >= self.stall_after_s * EXIT_AFTER_STALLS

    @property
    def stalled(self) -> bool:
        return self.stalled_since is not None

    def _clear(self) -> None:
        if self.stalled_since is not None:
            log.info("worker progressing again after %.1fs stalled",
                     self.clock() - self.stalled_since)
        self.stalled_since = None
        self.reason = ""

    def prometheus(self) -> str:
        """The watchdog's metrics, declared with the worker's others
        (router.base.metrics.METRICS)."""
        lines: list[str] = []
        for name, value in (("worker_stalled", int(self.stalled)),
                            ("worker_stalls_total", self.stalls),
                            ("worker_rebuilds_total", self.rebuilds)):
            lines.extend(family_header(name))
            lines.append(f"cutover_{name} {value}")
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict[str, object]:
        return {"stalled": self.stalled, "reason": self.reason or None,
                "rebuilds": self.rebuilds, "stalls": self.stalls}


class Watchdog:
    """The thread that ends a worker whose data thread does not come back from a step."""

    def __init__(self, progress: Progress, stop: threading.Event,
                 exit_process: Callable[[int], None] = os._exit) -> None:
        self.progress = progress
        self.stop = stop
        self.exit_process = exit_process
        self.thread = threading.Thread(target=self._run, name="cutover-watchdog", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        reported = False
        while not self.stop.wait(LOOK_EVERY_S):
            must_exit = self.progress.look()
            if self.progress.stalled and not reported:
                log.error("worker stalled: %s; /health reports it", self.progress.reason)
            reported = self.progress.stalled
            if must_exit:
                log.critical("worker stalled: %s; exiting (code %d) so that its supervisor "
                             "restarts it; it resumes from its partitions' checkpoints",
                             self.progress.reason, EXIT_STALLED)
                logging.shutdown()
                self.exit_process(EXIT_STALLED)
                return
