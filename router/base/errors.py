"""The router worker's named failures.

Each one ends the batch in progress with a sentence that says what happened. The worker then
rebuilds its clients and rejoins the group (router.worker.datapath), resuming every partition it
gets back from its checkpoint, which never passes a record whose output was not delivered; as a
restarted process would, without the restart. :class:`RouterConfigError` instead ends the
worker (code 2): rebuilding cannot mend settings. So does a run of rebuilds that brings no
progress (router.worker.rebuilds, code 1), for the worker's supervisor to restart it.
"""

from __future__ import annotations


class RouterError(RuntimeError):
    """The data path cannot go on safely with its clients as they are: rebuilding them and
    rejoining is the remedy."""


class RouterConfigError(RouterError):
    """The topics do not fit the settings (missing output, partition counts differ)."""


class OwnershipLost(RouterError):
    """The group may have moved a raw partition away: its output must not be written."""


class OutputWriteFailed(RouterError):
    """A batch's output was not delivered, or the output's end could not be read before it."""


class CheckpointWriteFailed(RouterError):
    """A batch's checkpoint was not stored, so its output is not produced."""


class BatchAborted(RouterError):
    """A batch's transaction was aborted (a failed send, a commit that did not complete): its
    partitions are replayed from their checkpoints, in the same process."""


class ProducerFenced(RouterError):
    """A newer owner of a raw partition initialised its transactional producer: this worker is
    a zombie for that partition and gives its partitions up, then rejoins the group."""


class FailpointHit(RouterError):
    """A test seam fired (``CUTOVER_FAILPOINT``): handled as the failure it stands for."""


class ConsumerFailed(RouterError):
    """The data consumer hit an error it cannot go on from (a fatal error, such as a static
    member fenced after the group coordinator moved): the worker rebuilds it and rejoins.
    Raised between batches (no batch is half written), so with transactions the partitions
    are kept through the rebuild (router.worker.datapath)."""


class WorkerStalled(RouterError):
    """The worker owns partitions with input waiting and decided nothing for ``stall_after_s``
    (router.worker.watchdog): it rebuilds its clients and rejoins."""
