"""Test seams: named points where a router worker fails on purpose, the same way every run.

A failure at a chosen step of a batch cannot be hit reliably from outside (a batch takes
milliseconds), so the tests arm one here. ``CUTOVER_FAILPOINT=<name>[,<name>...]`` arms points,
each of which fires once per process; with ``CUTOVER_FAILPOINT_ARM=<file>`` they fire only once
that file exists (a test arms them when it wants). Unset, every check is one set lookup. Names:

* ``after-checkpoint``: exit at once after a batch's checkpoint is written, before its output;
* ``txn-before-send``: the batch's transactions are open, nothing of it is sent yet;
* ``txn-after-send``: a partition's records of the batch are delivered and checked, its
  transaction not committed (in its commit thread: router.durability.transactions.write_batch);
* ``txn-commit-timeout``: the first commit is given no time (a real client timeout);
* ``txn-commit-fails``: the first commit takes half a second and then fails as one that
  needs an abort (it is aborted, and the partition replayed), while the worker consumes the
  next batch;
* ``txn-commit-fails-slowly``: the same, after two and a half seconds (longer than the data
  path waits for a commit: the partition is set aside, paused, its records kept back, when
  its commit fails);
* ``txn-commit-stalls``: the first commit waits ten seconds before it is sent (a transaction
  coordinator that does not answer), then commits;
* ``txn-commits-slow``: every commit of raw partition 0 takes a second and a half (longer than
  the data path waits for a commit before it sets the partition aside), for as long as the
  worker runs;
* ``purge-every-batch``: the worker purges old identities from its stores at every batch, not
  every 30 s (router.durability.batch_end), for as long as it runs;
* ``exit-after-commit``: exit at once after a partition's batch with output records
  committed and its store was flushed (in its commit thread), before any later checkpoint;
* ``pause-before-commit``: the worker stops itself (SIGSTOP) after its batch is delivered and
  before any partition of it commits, and goes on where it stopped when the test sends
  SIGCONT (a zombie).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from router.base.errors import FailpointHit

log = logging.getLogger("cutover.router")

ARMED = frozenset(n for n in os.environ.get("CUTOVER_FAILPOINT", "").split(",") if n)
_ARM_FILE = os.environ.get("CUTOVER_FAILPOINT_ARM", "")
_fired: set[str] = set()
_lock = threading.Lock()  # partitions commit from several threads


def fire(name: str) -> bool:
    """True once, the first time ``name`` is reached while armed."""
    if name not in ARMED or name in _fired:
        return False
    if _ARM_FILE and not os.path.exists(_ARM_FILE):
        return False
    with _lock:
        if name in _fired:
            return False
        _fired.add(name)
    log.error("failpoint %s", name)
    return True


def active(name: str) -> bool:
    """True every time ``name`` is reached while armed (a lasting condition, not one event)."""
    if name not in ARMED:
        return False
    return not _ARM_FILE or os.path.exists(_ARM_FILE)


def raise_at(name: str) -> None:
    """The batch fails here (handled as a failed send)."""
    if fire(name):
        raise FailpointHit(f"failpoint {name}")


def pause_at(name: str, first: Callable[[], object] | None = None) -> None:
    """The worker stops here until SIGCONT (after ``first()``, if given)."""
    if fire(name):
        if first is not None:
            first()
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(0.5)  # the stop reaches every thread before this one goes on
        log.error("failpoint %s: resumed", name)
