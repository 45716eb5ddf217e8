"""The worker's data consumer, one object for the worker's whole run though a rebuild replaces
its client (router.worker.datapath.DataPath._rebuild).

Why a holder: the loop, the batch's end (router.durability.batch_end, which commits through the
current client) and the rebalance callbacks all reach the client through it, so a rebuild
changes it in one place and nothing holds on to the old one. A rebuild first retires the old
client, then closes it in the background and joins a new one: while retired, the old client's
rebalance callbacks (its close runs them, on another thread) are not this worker's any more,
and nothing resumes, notes or closes it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import Consumer

if TYPE_CHECKING:
    from router.native._fastpath import Tap


class DataConsumer:
    """The current data consumer (``client``), its tap (``tap``: the records librdkafka's
    interceptor kept for the compiled path, router.native.compiled.client_tap; None without
    it) and whether it is still this worker's (``live``: False from a rebuild's
    :meth:`retire` until its :meth:`replace`)."""

    __slots__ = ("client", "live", "tap")

    def __init__(self, client: Consumer, tap: Tap | None = None) -> None:
        self.client = client
        self.tap = tap
        self.live = True

    def is_current(self, client: Consumer) -> bool:
        """``client`` is the worker's live consumer: its rebalance callbacks are acted on."""
        return self.live and client is self.client

    def retire(self) -> Consumer:
        """The client is being replaced: returned for closing, and no longer the worker's."""
        self.live = False
        return self.client

    def replace(self, client: Consumer, tap: Tap | None = None) -> None:
        """A rebuild's new client, joined to the group."""
        self.client = client
        self.tap = tap
        self.live = True
