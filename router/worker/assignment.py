"""The partitions a worker owns, as the consumer group assigns and revokes them.

Rebalance callbacks run only inside the data consumer's ``consume()``, between batches
(router.worker.datapath), so a partition is never given up with output of it undelivered. Taking a
partition over reads its newest checkpoint and rebuilds its state (router.durability.takeover); with
transactions the worker's producers are started first and the open transactions of previous
owners on the partitions ended (router.durability.fencing). A batch whose transaction aborted is
taken over again the same way and replayed from its checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from cutover.plan import CutoverPlan
from cutover.settings import RouterSettings
from router.base.kafka_io import client_conf, log_starts
from router.dedup.memory import StoreMemory
from router.durability.checkpoint import last_written, read_checkpoints
from router.durability.fencing import end_open_transactions
from router.durability.partition import Owned, RouteRuntime
from router.durability.positions import PositionCheck
from router.durability.takeover import take_over
from router.durability.transactions import PartitionKey, WorkerTransactions
from router.worker.status_publisher import StatusBoard

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
    txn: WorkerTransactions | None
    board: StatusBoard
    owned: dict[PartitionKey, Owned]
    memory: StoreMemory   # what the worker's dedup stores share
    # Called before the group gives or takes partitions, with the partitions about to be
    # closed (None: any may be): waits for their commits in flight
    # (router.durability.batch_end.BatchEnd.wait), so that no partition is closed mid-commit.
    before_change: Callable[[set[PartitionKey] | None], None]
    # Called after partitions were taken over: recovering is progress (router.worker.watchdog).
    on_takeover: Callable[[], None]
    # The group's assignment is incremental (router.base.kafka_io.assignment_strategy): the
    # callbacks are given only the partitions that move, and add or remove just those.
    cooperative: bool
    by_tp: dict[tuple[str, int], Owned] = field(default_factory=dict)
    # Partitions an orderly rebalance revoked, kept whole (decision state, store, producer)
    # until the next assignment says whether they stay: see :meth:`on_revoke`.
    parked: dict[PartitionKey, Owned] = field(default_factory=dict)
    # Where each raw partition was put, until its first record confirms it
    # (router.durability.positions).
    positions: PositionCheck = field(default_factory=PositionCheck)

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = sorted({(self.topic_route[tp.topic].settings.name, tp.partition)
                       for tp in partitions if tp.topic in self.topic_route})
        self.before_change(set(self.parked) - set(keys))   # the parked ones that moved
        if self.txn is not None and keys:
            # once for every partition given, kept or new: the writers that hold one back are
            # named by the checkpoints of all of them (router.durability.fencing)
            self.txn.start()
            self._end_open_transactions(set(keys))
        kept = self._unwritten_since([k for k in keys if k in self.parked])
        for key in kept:
            self.owned[key] = self.parked.pop(key)
        self._close(self.parked)   # moved to another worker
        self.owned.update(self._resume(consumer, [k for k in keys if k not in self.owned],
                                       ended=True))
        assign = []
        for tp in partitions:
            rt = self.topic_route.get(tp.topic)
            if rt is None:
                continue
            owned = self.owned[(rt.settings.name, tp.partition)]
            assign.append(TopicPartition(tp.topic, tp.partition,
                                         owned.durability.next_offsets.get(tp.topic, 0)))
        if self.cooperative:
            consumer.incremental_assign(assign)
        else:
            consumer.assign(assign)
        self.positions.positioned(assign)
        self._index()
        self.board.changed = True
        self.on_takeover()
        # every partition the worker owns now: with cooperative assignment the group gave only
        # the new ones, and the others were never revoked
        stayed = len(self.owned) - len(keys) + len(kept)
        log.info("took over partitions %s%s", sorted(self.owned),
                 f" ({stayed} kept through the rebalance)" if stayed else "")

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """An orderly rebalance revokes the partitions that move (cooperative assignment), or
        every partition (range, which is eager), mostly to give most of them straight back.
        With transactions a revoked partition is
        parked, not closed: if the next assignment gives it back, it goes on from where it
        stood, without a takeover (no checkpoint read or read-back), so a worker joining or
        leaving stops only the partitions that move. Why that is safe: a partition given back
        is kept only if no other worker committed a checkpoint of it since this worker's last
        (:meth:`_unwritten_since`); a worker that wrote it in between committed one with its
        output, in the same transaction. Without transactions nothing fences, so revoked
        partitions are given up and taken over again.

        A parked partition's commit may still be in flight: it is not waited for here (a
        commit waiting on a frozen broker would hold the worker's rejoin, and with it the
        whole group's rebalance), but settled once the partition is given back, or, if it
        moved, waited for before the partition is closed (:meth:`on_assign`)."""
        keys = {(self.topic_route[tp.topic].settings.name, tp.partition)
                for tp in partitions if tp.topic in self.topic_route}
        if self.txn is None:
            self.before_change(None)
            self.drop(keys)
        else:
            self.before_change(set())
            for key in keys:
                owned = self.owned.pop(key, None)
                if owned is not None:
                    self.parked[key] = owned
            self._index()
        if self.cooperative:
            consumer.incremental_unassign(partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The session expired: the partitions may already be another worker's. With
        transactions they are parked as revoked ones are (:meth:`on_revoke`), and for the same
        reason: a partition given back that someone else wrote in between is taken over
        properly (:meth:`_unwritten_since`), and this worker's commits in flight with the lost
        session's generation are refused by the group (router.durability.transactions). A session
        lost to a moving group coordinator, after which the group gives every worker its partitions
        back, then costs no takeover. Without transactions nothing fences: they are given
        up."""
        log.warning("partitions lost (session expired): %s",
                    [f"{tp.topic}:{tp.partition}" for tp in partitions])
        if self.txn is not None:
            self.on_revoke(consumer, partitions)
            return
        self.before_change(None)
        self.drop({(self.topic_route[tp.topic].settings.name, tp.partition)
                   for tp in partitions if tp.topic in self.topic_route})
        self._close(self.parked)
        if self.cooperative:
            consumer.incremental_unassign(partitions)

    def park_all(self) -> None:
        """Park every owned partition whole (the consumer alone is being rebuilt, with
        transactions: the same reasons as :meth:`on_revoke`); the new consumer's first
        assignment keeps those given back and closes the others."""
        assert self.txn is not None
        self.parked.update(self.owned)
        self.owned.clear()
        self._index()

    def drop(self, keys: set[PartitionKey], discard: bool = False) -> None:
        """Give partitions up: close their stores (``discard``: the worker is rebuilding its
        clients, and its producers are reset:
        router.durability.transactions.WorkerTransactions.reset)."""
        gone = {k: o for k in keys if (o := self.owned.pop(k, None)) is not None}
        self._close(gone)
        if self.txn is not None:
            self.txn.release(keys)
            if discard:
                self.txn.reset()
        self._index()

    def drop_all(self, discard: bool = False) -> None:
        """Give every partition up, parked ones included (the worker rebuilds its clients)."""
        self._close(self.parked)
        self.drop(set(self.owned), discard)

    def _close(self, parts: dict[PartitionKey, Owned]) -> None:
        """Close the stores of partitions no longer this worker's; empties ``parts``."""
        for owned in parts.values():
            owned.store.close()
            self.board.partition_released(owned.route.settings.name, owned.partition,
                                          owned.router.counters)
        if self.txn is not None:
            self.txn.release(parts)
        if parts:
            self.board.changed = True
            log.info("released partitions %s", sorted(parts))
        parts.clear()

    def retake(self, consumer: Consumer, keys: set[PartitionKey]) -> None:
        """Take partitions whose batch aborted over again from their checkpoints, and read
        them again from there."""
        for key in keys:
            owned = self.owned.pop(key, None)
            if owned is not None:
                owned.store.close()  # its unflushed identities are the aborted batch's
                self.board.partition_released(owned.route.settings.name, owned.partition,
                                              owned.router.counters)
        fresh = self._resume(consumer, sorted(keys))
        self.owned.update(fresh)
        for (_, p), owned in fresh.items():
            for t in owned.route.settings.inputs:
                at = TopicPartition(t, p, owned.durability.next_offsets[t])
                consumer.seek(at)
                self.positions.positioned([at])
        self._index()
        self.board.changed = True

    def _end_open_transactions(self, keys: set[PartitionKey]) -> None:
        assert self.txn is not None
        outputs: dict[str, set[int]] = {}
        for route, p in keys:
            rs = self.routes[route].settings
            for topic in (rs.output, rs.dead_letter, rs.shadow):
                if topic is not None:
                    outputs.setdefault(topic, set()).add(p)
        if not end_open_transactions(client_conf(self.settings, "producer"),
                                     self.settings.group_id, self.txn.worker_id,
                                     self.ckpt_topic, outputs, keys):
            log.warning("partitions %s: a transaction stayed open on their outputs or "
                        "checkpoints; resuming from the newest checkpoint before it (more is "
                        "replayed, nothing is lost)", sorted(keys))

    def _unwritten_since(self, keys: list[PartitionKey]) -> list[PartitionKey]:
        """The parked partitions of ``keys`` that no other worker wrote since this worker's
        last checkpoint of them (the others are closed and taken over again): the newest
        checkpoint in the topic's order is still this worker's, of its ownership generation.
        The caller has ended the transactions still open on them (router.durability.fencing): a
        worker that received a partition in between may still have been committing it."""
        if not keys or self.txn is None:
            return keys
        last = last_written(client_conf(self.settings), self.ckpt_topic, set(keys))
        kept = []
        for key in keys:
            ck, dur = last.get(key), self.parked[key].durability
            if (ck is None and dur.seq == 0) or (
                    ck is not None and ck.worker == self.txn.worker_id
                    and ck.owner_gen == dur.owner_gen):
                kept.append(key)
            else:
                log.info("partition %s/%d: written by %s since it was parked here; taken over "
                         "again", key[0], key[1], "another worker" if ck is None else ck.worker)
        return kept

    def _index(self) -> None:
        self.by_tp = {(t, p): o for (_, p), o in self.owned.items()
                      for t in o.route.settings.inputs}

    def _resume(self, consumer: Consumer, keys: list[PartitionKey],
                ended: bool = False) -> dict[PartitionKey, Owned]:
        """Take partitions over from their newest checkpoints (router.durability.takeover). With
        transactions, first start the worker's producers (which aborts its own transactions
        of a previous run), and end the previous owners' open transactions on the partitions'
        outputs and on the checkpoint topic (router.durability.fencing; ``ended``: the caller did),
        so that the newest committed checkpoint is the one read and nothing is committed under
        the read-back."""
        if not keys:
            return {}
        conf = client_conf(self.settings)
        began = time.monotonic()
        if self.txn is not None and not ended:
            self.txn.start()
            self._end_open_transactions(set(keys))
        fenced = time.monotonic()
        ckpts = read_checkpoints(conf, self.ckpt_topic, set(keys))
        read = time.monotonic()

        starts = log_starts(conf, [TopicPartition(t, p) for r, p in keys
                                   for t in self.routes[r].settings.inputs])

        def low_offset(topic: str, partition: int) -> int:
            return max(starts.get((topic, partition), 0), 0)

        taken = take_over(conf, self.routes, self.plans, {k: ckpts.get(k) for k in keys},
                          self.settings.state_dir, low_offset, self.memory,
                          atomic=self.txn is not None)
        log.info("took %d partitions over in %.2fs: producers and open transactions %.2fs, "
                 "checkpoints %.2fs, stores and read-back %.2fs", len(keys),
                 time.monotonic() - began, fenced - began, read - fenced, time.monotonic() - read)
        return taken
