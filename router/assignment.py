"""The partitions a worker owns, as the consumer group assigns and revokes them.

Rebalance callbacks run only inside the data consumer's ``consume()``, between batches
(router.datapath), so a partition is never given up with output of it undelivered. Taking a
partition over reads its newest checkpoint and rebuilds its state (router.takeover); with
transactions its producer is started first, which fences the previous owner. A batch whose
transaction aborted is taken over again the same way and replayed from its checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cutover.plan import CutoverPlan
from cutover.settings import RouterSettings
from router.checkpoint import read_checkpoints
from router.kafka_io import client_conf, wait_stable
from router.partition import Owned, RouteRuntime
from router.status_publisher import StatusBoard
from router.takeover import take_over
from router.transactions import PartitionKey, PartitionTransactions

log = logging.getLogger("cutover.router")


@dataclass
class Assignment:
    """``owned``: route partition -> its state; ``by_tp``: (raw topic, partition) -> the same,
    for the per-record path. ``routes``, ``topic_route`` and ``plans`` are the worker's own
    (shared, not copied)."""

    settings: RouterSettings
    routes: dict[str, RouteRuntime]
    topic_route: dict[str, RouteRuntime]
    plans: dict[str, CutoverPlan]
    ckpt_topic: str
    txn: PartitionTransactions | None
    board: StatusBoard
    owned: dict[PartitionKey, Owned]
    by_tp: dict[tuple[str, int], Owned] = field(default_factory=dict)
    # Called before the group gives or takes partitions: waits for the last batch's commits
    # (router.batch_end.BatchEnd.wait), so that no partition changes hands mid-commit.
    before_change: Callable[[], None] = lambda: None
    # Called after partitions were taken over: recovering is progress (router.watchdog).
    on_takeover: Callable[[], None] = lambda: None

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.before_change()
        keys = sorted({(self.topic_route[tp.topic].settings.name, tp.partition)
                       for tp in partitions if tp.topic in self.topic_route})
        self.owned.update(self._resume(consumer, [k for k in keys if k not in self.owned]))
        assign = []
        for tp in partitions:
            rt = self.topic_route.get(tp.topic)
            if rt is None:
                continue
            owned = self.owned[(rt.settings.name, tp.partition)]
            assign.append(TopicPartition(tp.topic, tp.partition,
                                         owned.durability.next_offsets.get(tp.topic, 0)))
        consumer.assign(assign)
        self._index()
        self.board.changed = True
        self.on_takeover()
        log.info("took over partitions %s", keys)

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.before_change()
        self.drop({(self.topic_route[tp.topic].settings.name, tp.partition)
                   for tp in partitions if tp.topic in self.topic_route})

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("partitions lost (session expired): %s",
                    [f"{tp.topic}:{tp.partition}" for tp in partitions])
        self.on_revoke(consumer, partitions)

    def drop(self, keys: set[PartitionKey], discard: bool = False) -> None:
        """Give partitions up: close their stores and producers (``discard``: purged, not
        flushed: router.transactions.PartitionTransactions.drop)."""
        for key in keys:
            owned = self.owned.pop(key, None)
            if owned is not None:
                owned.store.close()
        if self.txn is not None:
            self.txn.drop(keys, discard=discard)
        self._index()
        if keys:
            self.board.changed = True
            log.info("released partitions %s", sorted(keys))

    def retake(self, consumer: Consumer, keys: set[PartitionKey]) -> None:
        """Take partitions whose batch aborted over again from their checkpoints, and read
        them again from there."""
        for key in keys:
            owned = self.owned.pop(key, None)
            if owned is not None:
                owned.store.close()  # its unflushed identities are the aborted batch's
        fresh = self._resume(consumer, sorted(keys))
        self.owned.update(fresh)
        for (_, p), owned in fresh.items():
            for t in owned.route.settings.inputs:
                consumer.seek(TopicPartition(t, p, owned.durability.next_offsets[t]))
        self._index()
        self.board.changed = True

    def _index(self) -> None:
        self.by_tp = {(t, p): o for (_, p), o in self.owned.items()
                      for t in o.route.settings.inputs}

    def _resume(self, consumer: Consumer, keys: list[PartitionKey]) -> dict[PartitionKey, Owned]:
        """Take partitions over from their newest checkpoints (router.takeover). With
        transactions, first start their producers, which aborts and fences the previous
        owners' open transactions, and let other open transactions on the checkpoint topic
        end, so that the newest committed checkpoint is the one read."""
        if not keys:
            return {}
        conf = client_conf(self.settings)
        if self.txn is not None:
            self.txn.take(keys)
            if not wait_stable(conf, self.ckpt_topic):
                log.warning("checkpoint topic %s: a transaction stayed open; resuming from the "
                            "newest checkpoint before it (more is replayed, nothing is lost)",
                            self.ckpt_topic)
        ckpts = read_checkpoints(conf, self.ckpt_topic, set(keys))

        def low_offset(topic: str, partition: int) -> int:
            try:
                low, _ = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self.settings.request_timeout_s)
                return max(int(low), 0)
            except KafkaException:
                return 0

        return take_over(conf, self.routes, self.plans, {k: ckpts.get(k) for k in keys},
                         self.settings.state_dir, low_offset, atomic=self.txn is not None)
