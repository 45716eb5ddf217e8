"""The end of a batch: steps 3 to 5 of router.datapath's order, once every consumed record
of the batch is decided. Kept apart from the per-record loop, as faust keeps its producer
apart from its consumer loop: this is where the durability argument (README, "Durability")
is carried out, and nothing here runs per record.

Without transactions: the checkpoint of every changed partition is written and waited for,
then the queued output is produced and waited for, then the dedup stores are flushed and
the resume offsets committed to the group. With transactions (router.transactions): one
transaction per partition holds its checkpoint and its output; each partition's commit thread
waits for its output and checks where it landed, commits, and flushes its store once it
committed. Ownership is checked before either write.

With transactions that work is left in flight while the worker consumes the next batch
(:meth:`BatchEnd.complete` issues it, :meth:`BatchEnd.finish` waits for it and settles the
batch before any record of the next one is decided): consuming changes nothing the durability
argument rests on, and the delivery wait and the commit are round trips (measured together
20-35 ms a batch on one broker) that the worker otherwise sat out. The rebalance callbacks
wait for the commits first (:meth:`BatchEnd.wait`), so no partition changes hands
mid-commit; a partition whose commit failed (or whose output did not land where it should)
is taken over again after the consume, and the records consumed for it are dropped
(:class:`Stale`): they are read again from its checkpoint.

Each batch costs its partitions a transaction each, whatever its size: the delivery wait and
the commit round trips (15-30 ms and 5-7 ms a partition here) and the broker's work for them.
So a worker passing a backlog takes large batches (the ``batch_records`` setting, 80,000 by
default). Measured on the router benchmark's data (seven alternating rounds each, medians,
docs/performance.md): batches of 20,000 records reached 109% of the pass-through loop's
records/s, 40,000 120-123%, 80,000 150%; the loop itself gained nothing from 40,000 (101% of
its own figure with 20,000). Below a full batch the consume returns what arrived within its
50 ms wait, so at rates the router keeps up with its batches, and its latency, are unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from router.checkpoint import Checkpoint, write_checkpoints
from router.failpoints import fire, pause_at
from router.output_writer import OutputWriter, Sent
from router.ownership import PollClock, check_ownership
from router.partition import Owned, RouteRuntime
from router.transactions import (
    Commits,
    Failed,
    PartitionKey,
    PartitionTransactions,
    wait_commits,
    write_batch,
)

log = logging.getLogger("cutover.router")

PURGE_EVERY_S = 30


@dataclass(frozen=True)
class Stale:
    """Consumed records the next batch must not decide: read before their raw partition
    (topic, partition) was taken over again from its checkpoint, which reads them again."""

    partitions: frozenset[tuple[str, int]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.partitions)

    def fresh(self, msgs: list[Message]) -> list[Message]:
        """``msgs`` without the stale ones."""
        return [m for m in msgs
                if m.error() is not None or (m.topic(), m.partition()) not in self.partitions]

    def dropped(self, msgs: list[Message]) -> dict[tuple[str, int], int]:
        """How many of ``msgs`` are stale, per raw partition (topic, partition)."""
        counts: dict[tuple[str, int], int] = {}
        for m in msgs:
            if m.error() is None:
                tp = (m.topic(), m.partition())
                if tp in self.partitions:
                    counts[tp] = counts.get(tp, 0) + 1
        return counts


NOTHING_STALE = Stale()


@dataclass
class Ended:
    """A batch written and not settled yet: its commits in flight (``commits``), or what
    they left (``failed``: the partitions that did not commit; None without transactions)."""

    dirty: list[Owned]                           # partitions whose checkpoint the batch wrote
    offsets: dict[PartitionKey, dict[str, int]]  # their resume offsets
    commits: Commits | None = None
    failed: Failed | None = None


@dataclass
class BatchEnd:
    """Ends the data path's batches. ``owned`` and ``routes`` are the data path's own
    (shared, not copied); ``consumer`` gives the current data consumer (a rejoin replaces
    it); ``recover`` takes aborted or fenced partitions over again (router.datapath)."""

    owned: dict[PartitionKey, Owned]
    routes: dict[str, RouteRuntime]
    writer: OutputWriter
    producer: Producer
    txn: PartitionTransactions | None
    ckpt_topic: str
    worker_id: str
    clock: PollClock
    consumer: Callable[[], Consumer]
    recover: Callable[[Failed], Stale]
    _last_purge: float = field(default_factory=time.monotonic)
    _ended: Ended | None = None   # the last batch, to settle before the next is decided

    def complete(self) -> bool:
        """Make the batch durable; True if it had output to write."""
        writer = self.writer
        checked = writer.end_streams()
        dirty = [o for o in self.owned.values() if o.durability.dirty]
        if not dirty and not writer.queue:
            return False
        pending_out = len(writer.queue)
        ckpts: list[Checkpoint] = []
        for owned in dirty:
            rs = owned.route.settings
            at = owned.durability.next_checkpoint(owned.held_refs(), owned.router.horizon,
                                                  rs.dedup.retention_ms)
            ckpts.append(Checkpoint(
                route=rs.name, partition=owned.partition, seq=at.seq, offsets=at.offsets,
                snapshot=owned.router.snapshot(), readback_from=at.readback_from,
                rebuild_from=at.rebuild_from, worker=self.worker_id, owner_gen=at.owner_gen))
        self.check_ownership()
        offsets = {(c.route, c.partition): c.offsets for c in ckpts}
        if self.txn is not None:
            got = write_batch(self.txn, self.ckpt_topic, ckpts, self._transaction_keys(),
                              bool(writer.queue), lambda: self._send(self.txn, checked),
                              max(self.clock.left(0.9), 1.0), self.flush_store)
            writer.queue.clear()
            if isinstance(got, Commits):  # settled by finish(), after the next consume
                self._ended = Ended(dirty, offsets, commits=got)
            else:
                self._ended = Ended(dirty, offsets, failed=got)
                self.finish()
        else:
            self._write_checkpoint_first(ckpts)
            self._ended = Ended(dirty, offsets)
            self.finish()
        return pending_out > 0

    def wait(self) -> None:
        """Wait for the last batch's commits (if in flight); what they left to do is done by
        :meth:`finish`. Called before the group gives or takes partitions (in the rebalance
        callbacks, where a partition cannot be taken over again or the group rejoined), so
        that no partition changes hands mid-commit."""
        ended = self._ended
        if ended is not None and ended.commits is not None:
            ended.failed, ended.commits = wait_commits(ended.commits), None

    def abandon(self) -> None:
        """Wait for the last batch's commits and forget it (the worker is rebuilding its
        clients or stopping: partitions are resumed from their checkpoints, so what the batch
        left undone is done again by their next owner)."""
        ended, self._ended = self._ended, None
        if ended is not None and ended.commits is not None:
            try:
                wait_commits(ended.commits)
            except Exception as exc:  # a commit thread's own failure: the batch is replayed
                log.warning("the last batch's commits: %s", exc)

    def finish(self) -> Stale:
        """Settle the last batch before anything of the next one is decided: wait for its
        commits, take aborted partitions over again (or rejoin, if fenced), mark what was
        delivered, commit the resume offsets to the group, purge old identities now and then.
        Returns the records the next batch must not decide (consumed before a partition was
        taken over again: read again from its checkpoint)."""
        self.wait()
        ended, self._ended = self._ended, None
        if ended is None:
            return NOTHING_STALE
        stale = NOTHING_STALE if ended.failed is None else self.recover(ended.failed)
        dirty = [o for o in ended.dirty  # given up since, or taken over again (aborted)
                 if self.owned.get((o.route.settings.name, o.partition)) is o]
        commits: list[TopicPartition] = []
        for owned in dirty:
            if self.txn is None:  # with transactions: flushed once committed (write_batch)
                self.flush_store((owned.route.settings.name, owned.partition))
            owned.durability.batch_done()
            commits.extend(TopicPartition(t, owned.partition, o) for t, o in
                           ended.offsets[(owned.route.settings.name, owned.partition)].items())
        if commits:
            try:
                self.consumer().commit(offsets=commits, asynchronous=True)
            except KafkaException as exc:
                log.warning("offset commit: %s", exc)
        if time.monotonic() - self._last_purge > PURGE_EVERY_S:
            self._purge()
        return stale

    def flush_store(self, key: PartitionKey) -> None:
        """Make the partition's dedup store durable up to this batch: the identities of its
        delivered records and the checkpoint's seq. With transactions this runs in the
        partition's commit thread, after its commit (every commit is waited for before the next
        batch's records are decided: :meth:`finish`)."""
        owned = self.owned[key]
        owned.store.put_meta("seq", str(owned.durability.seq).encode())
        owned.store.flush()

    def check_ownership(self, after_write: bool = False) -> None:
        """Refuse to write for partitions this worker may no longer own (router.ownership)."""
        assigned = {(tp.topic, tp.partition) for tp in self.consumer().assignment()}
        check_ownership(list(self.owned), {r: rt.settings.inputs for r, rt in self.routes.items()},
                        assigned, self.clock.since_poll(), self.clock.max_poll_s,
                        after_write=after_write)

    def _transaction_keys(self) -> set[PartitionKey]:
        """The partitions in this batch's transactions: those with a checkpoint to write or
        output queued (a forward, dead letter or shadow copy marks its raw record undelivered
        in the partition's bookkeeping). Read from the owned partitions, not from the queued
        output: scanning the queue cost a tuple and a lookup per forwarded record (~30 ms
        per 100,000)."""
        return {key for key, o in self.owned.items()
                if o.durability.dirty or o.durability.undelivered}

    def _write_checkpoint_first(self, ckpts: list[Checkpoint]) -> None:
        """Without transactions: the checkpoint is durable before any output of the batch."""
        if ckpts:
            write_checkpoints(self.producer, self.ckpt_topic, ckpts)
            if self.writer.queue and fire("after-checkpoint"):
                os._exit(137)
        if self.writer.queue:
            self._send(None)
            pause_at("pause-before-commit")

    def _send(self, txn: PartitionTransactions | None, checked: bool = False) -> Sent:
        """Produce the batch's queued output (through the partitions' transactional
        producers, if any), checking ownership right before and after. Without transactions
        the output is waited for and checked here; with them each partition's commit thread
        does it (router.transactions.write_batch), while this thread consumes the next batch.
        ``checked``: the end of every output partition was read in this batch already, before
        its first output was produced as decided (router.inline_output, with transactions);
        the queued output (the records held back to be produced last, and what followed a
        stream that stopped on a produce error) is then not checked again. A second ask could
        not see more than the delivery check after it does: once the batch's transaction holds
        records in the partition, the last stable offset stops at the first of them. That
        saves the batch a ListOffsets round trip on the data path's thread (5-10 ms on the
        test broker; docs/performance.md)."""
        self.check_ownership()  # again, as late as possible before writing
        if not checked:
            self.writer.fence_foreign_writes(self.owned.values())
        sent = self.writer.send(self.owned.values(), None if txn is None else txn.producer_of)
        if txn is None:
            self.writer.settle(sent, lambda: self.clock.left(0.9))
        self.check_ownership(after_write=True)
        return sent

    def _purge(self) -> None:
        """Drop identities older than each partition's retention window from its store."""
        self._last_purge = time.monotonic()
        for owned in self.owned.values():
            h = owned.router.horizon
            if h is not None:
                owned.store.purge(h - owned.route.settings.dedup.retention_ms)
