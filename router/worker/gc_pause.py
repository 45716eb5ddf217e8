"""Cyclic garbage collection paused while a batch is in flight.

A consumed batch keeps about eight container objects per record alive until its output is
written (the messages, their header lists, the queued outputs); then reference counting frees
them all at once. With the cyclic collector running, CPython scans and promotes those objects
many times over in between, for nothing. Nothing the data path builds per record forms a
reference cycle (and must not: such a cycle would live until the batch ends).

Between batches (while the next one is consumed) the collector runs, and each of its full
passes walked every object the worker made at start-up (modules, settings, clients, models):
:func:`freeze_start_up` takes those out of its reach once the worker is up. What each saved:
docs/decisions/009-gc-and-allocator.md.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0
_was_enabled = False


@contextmanager
def batch_gc_pause() -> Iterator[None]:
    """Disable the cyclic collector for the block. Nests and overlaps across threads: the
    collector comes back (if it was on) when the last paused block ends."""
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                gc.enable()


def freeze_start_up() -> None:
    """Collect once, then move every object alive now into the collector's permanent
    generation (:func:`gc.freeze`): they are never scanned again. Objects made later are
    collected as before. Called once, when the worker is up and before its first batch."""
    gc.collect()
    gc.freeze()
