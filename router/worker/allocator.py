"""The C allocator tuned for the router's process (glibc only; another C library, such as musl,
is left as it is).

- **Fastbins off.** Every forwarded record is a librdkafka message allocated on the data path's
  thread and freed on a broker thread once delivered, and every consumed batch frees its fetch
  buffers there; with glibc's fastbins, those frees pile small chunks up that the next large
  allocation stops to consolidate, a large share of the data path's CPU. With fastbins off
  (``mallopt(M_MXFAST, 0)``) small chunks still come from the per-thread cache
  (docs/decisions/009-gc-and-allocator.md).
- **Few arenas, free pages given back.** glibc gives each new thread an arena of its own, up to
  eight per core, and keeps what is freed inside an arena for reuse unless it lies at the
  arena's top. Every rebalance starts and stops clients (transactional producers, the
  checkpoint and read-back consumers) whose threads allocate and free their buffers in
  whichever arena they drew: a worker's resident memory grew with the rebalances it went
  through while what it held stayed flat. The worker caps the arenas at start, before any
  client's thread exists (``mallopt(M_ARENA_MAX)``; an operator's ``MALLOC_ARENA_MAX`` wins),
  and returns the whole free pages of every arena to the system every ``TRIM_EVERY_S``
  (``malloc_trim(0)``): docs/decisions/017-the-worker-gives-free-heap-back.md.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
import time

log = logging.getLogger("cutover.router")

M_MXFAST = 1      # glibc's malloc.h
M_ARENA_MAX = -8  # glibc's malloc.h
ARENA_MAX = 2
TRIM_EVERY_S = 30.0


def _glibc() -> ctypes.CDLL | str:
    """glibc's functions, or why not (for the start-up log)."""
    lib, _version = platform.libc_ver()
    if lib != "glibc":
        return f"as the C library has it ({lib or 'not glibc'})"
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return "as glibc has it (mallopt or malloc_trim not found)"
    return libc


def fastbins_off() -> str:
    """Turn glibc's fastbins off for the whole process; says what was done, for the start-up
    log line."""
    libc = _glibc()
    if isinstance(libc, str):
        return libc
    if libc.mallopt(M_MXFAST, 0) != 1:
        return "as glibc has it (mallopt refused M_MXFAST)"
    return "glibc, fastbins off"


def cap_arenas(limit: int = ARENA_MAX) -> str:
    """Cap glibc's arenas at ``limit`` for the rest of the process; says what was done.

    glibc fixes the cap when a thread first needs an arena of its own, so this must run before
    the process starts its second thread: the worker calls it first thing
    (router.worker.app.run_worker). An operator's ``MALLOC_ARENA_MAX`` (read by glibc at start) is
    left in force."""
    libc = _glibc()
    if isinstance(libc, str):
        return libc
    if os.environ.get("MALLOC_ARENA_MAX"):
        return f"{os.environ['MALLOC_ARENA_MAX']} arenas (MALLOC_ARENA_MAX)"
    if libc.mallopt(M_ARENA_MAX, limit) != 1:
        return "arenas as glibc has them (mallopt refused M_ARENA_MAX)"
    return f"{limit} arenas"


def give_back_free_memory() -> bool:
    """Return the whole free pages of every arena to the system; True if any were."""
    libc = _glibc()
    return not isinstance(libc, str) and libc.malloc_trim(0) == 1


class FreeMemoryTrim:
    """The thread that calls :func:`give_back_free_memory` every ``every_s`` until ``stop``."""

    def __init__(self, stop: threading.Event, every_s: float = TRIM_EVERY_S) -> None:
        self.stop = stop
        self.every_s = every_s
        self.thread = threading.Thread(target=self._run, name="cutover-heap-trim", daemon=True)

    def start(self) -> None:
        if not isinstance(_glibc(), str):
            self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            began = time.monotonic()
            give_back_free_memory()
            log.debug("free heap returned to the system in %.1f ms",
                      (time.monotonic() - began) * 1000)
