"""The end of a batch: steps 3 to 5 of router.worker.datapath's order, once every consumed record
of the batch is decided. Kept apart from the per-record loop, as faust keeps its producer
apart from its consumer loop: this is where the durability argument (docs/design.md,
"Durability: the output log is the record of truth") is carried out, and nothing here runs per
record.

Without transactions: the checkpoint of every changed partition is written and waited for,
then the queued output is produced and waited for, then the dedup stores are flushed and
the resume offsets committed to the group. With transactions (router.durability.transactions): one
transaction per partition holds its checkpoint and its output; each partition's commit thread
waits for its output and checks where it landed, commits, and flushes its store once it
committed. Ownership is checked before either write.

With transactions that work is left in flight while the worker consumes the next batch
(:meth:`BatchEnd.complete` issues it, :meth:`BatchEnd.settle` settles it before any record of
the next one is decided): consuming changes nothing the durability argument rests on, and the
delivery wait and the commit are round trips that the worker otherwise sat out. Settling is
per partition: a partition whose commit is still in flight after ``SETTLE_WAIT_S`` (its
transaction coordinator or its output's leader is slow, frozen or gone) stays in flight, and
the data path sets it aside (router.worker.datapath: its records are read again once it settles)
while the other partitions go on. A rebalance waits only for the commits of the partitions it
closes (:meth:`BatchEnd.wait`): with transactions a revoked partition is parked with its commit
in flight, and settled once the group gives it back (a commit stuck on a frozen broker then
holds that partition only, not the worker's rejoin); a partition whose commit
failed (or whose output did not land where it should) is taken over again after the consume,
and the records consumed for it are dropped (:class:`Stale`): they are read again from its
checkpoint.

Each batch costs its partitions a transaction each, whatever its size: the delivery wait and
the commit round trips and the broker's work for them. So a worker passing a backlog takes
large batches (the ``batch_records`` setting, 80,000 by default; why that size:
docs/decisions/005-batch-size.md). Below a full batch the consume returns what arrived within
its 50 ms wait, so at rates the router keeps up with its batches, and its latency, are
unchanged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from router.base.errors import BatchAborted, OutputWriteFailed, ProducerFenced, RouterError
from router.base.failpoints import active, fire, pause_at
from router.durability.checkpoint import Checkpoint, write_checkpoints
from router.durability.output_writer import OutputWriter, Sent
from router.durability.ownership import PollClock, check_ownership
from router.durability.partition import Owned, RouteRuntime
from router.durability.transactions import (
    BatchWrite,
    Commits,
    Failed,
    PartitionKey,
    WorkerTransactions,
    write_batch,
)

log = logging.getLogger("cutover.router")

PURGE_EVERY_S = 30
# How long the data path waits, after a consume, for the last batch's commits before it sets
# the partitions whose commit is still in flight aside (router.worker.datapath: their records are
# read again once it settles) and goes on with the others. A commit takes milliseconds; one that
# takes longer waits on a broker that is slow, frozen or gone.
SETTLE_WAIT_S = 1.0


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
class StoreFlush:
    """The store flush of a batch's partitions, each run by its commit thread once it
    committed (:func:`flush_store`), on the partitions as the batch knew them (``owners``: a
    copy taken when the batch was written; a partition may be parked by a rebalance by then:
    router.worker.assignment). A partition whose commit was given up as stuck is not flushed: once
    :meth:`abandon` returns, no flush of it runs or will run, so its store may be closed."""

    owners: dict[PartitionKey, Owned]
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _abandoned: set[PartitionKey] = field(default_factory=set)

    def __call__(self, key: PartitionKey) -> None:
        with self._lock:
            if key not in self._abandoned:
                flush_store(self.owners, key)

    def abandon(self, key: PartitionKey) -> None:
        with self._lock:
            self._abandoned.add(key)


@dataclass
class InFlight:
    """One partition's share of a batch written and not settled yet: its commit in flight
    (``commit``; None without transactions, where the batch is settled at once)."""

    owned: Owned
    offsets: dict[str, int]      # its resume offsets, committed to the group once settled
    commit: Future[RouterError | None] | None
    written: bool                # the batch wrote its output partition
    issued: float = 0.0          # time.monotonic() when its commit was issued
    flush: StoreFlush | None = None   # its store flush, run by its commit thread


@dataclass
class BatchEnd:
    """Ends the data path's batches. ``owned`` and ``routes`` are the data path's own
    (shared, not copied); ``consumer`` gives the current data consumer (a rejoin replaces
    it); ``recover`` takes aborted or fenced partitions over again (router.worker.datapath)."""

    owned: dict[PartitionKey, Owned]
    routes: dict[str, RouteRuntime]
    writer: OutputWriter
    producer: Producer
    txn: WorkerTransactions | None
    ckpt_topic: str
    worker_id: str
    clock: PollClock
    consumer: Callable[[], Consumer]
    consumer_failed: Callable[[], bool]   # the consumer reported a fatal error
    recover: Callable[[Failed], Stale]
    # The data consumer's group metadata as last noted, if the worker is a member
    # (router.durability.transactions: a transaction's offsets are sent with it). Read by the commit
    # threads, which never call the consumer themselves.
    group: Callable[[], bytes | None]
    # Partitions a rebalance revoked and the next assignment has not placed yet (the
    # assignment's own, shared: router.worker.assignment.Assignment.parked).
    parked: dict[PartitionKey, Owned]
    # A commit in flight this long is given up as stuck (the commit_stuck_s setting).
    stuck_s: float
    _last_purge: float = field(default_factory=time.monotonic)
    # Partitions of batches written and not settled yet: no later batch writes them, and the
    # data path decides none of their records, until they are (:meth:`settle`).
    in_flight: dict[PartitionKey, InFlight] = field(default_factory=dict)
    # Partitions whose producer is committing another batch (:meth:`plan`).
    blocked: set[PartitionKey] = field(default_factory=set)

    def complete(self) -> bool:
        """Make the batch durable; True if it had output to write. Partitions whose last
        commit is still in flight are not part of it (nothing of theirs was decided)."""
        writer = self.writer
        checked = writer.end_streams()
        busy = self.unsettled()
        dirty = [o for k, o in self.owned.items() if o.durability.dirty and k not in busy]
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
        by_key = {(o.route.settings.name, o.partition): o for o in dirty}
        if self.txn is not None:
            keys = self._transaction_keys(busy)
            flush = StoreFlush({k: self.owned[k] for k in keys})
            got = write_batch(self.txn, BatchWrite(self.ckpt_topic, ckpts, keys, self.group),
                              bool(writer.queue), lambda: self._send(self.txn, checked),
                              max(self.clock.left(0.9), 1.0), flush)
            writer.queue.clear()
            if isinstance(got, Commits):  # settled after the next consume (:meth:`settle`)
                written = {(o.route.settings.name, o.partition) for o in got.written}
                issued = time.monotonic()
                for key, commit in zip(got.order, got.futures, strict=True):
                    self.in_flight[key] = InFlight(
                        owned=self.owned[key], offsets=offsets.get(key, {}), commit=commit,
                        written=key in written, issued=issued, flush=flush)
            else:
                self._settle({k: InFlight(owned=self.owned[k], offsets=offsets.get(k, {}),
                                          commit=None, written=False) for k in keys}, got)
        else:
            self._write_checkpoint_first(ckpts)
            self._settle({k: InFlight(owned=o, offsets=offsets[k], commit=None, written=False)
                          for k, o in by_key.items()}, Failed(set(), set()))
        return pending_out > 0

    def plan(self) -> None:
        """At a batch's start, before :meth:`unsettled`: which producer each partition writes
        through in it, and which partitions wait for their producer's commit in flight
        (router.durability.transactions.WorkerTransactions.plan)."""
        self.blocked = set() if self.txn is None else self.txn.plan(self.owned)

    def unsettled(self) -> set[PartitionKey]:
        """Partitions whose last commit is still in flight, and those whose producer's is
        (as planned at the batch's start: :meth:`plan`)."""
        return set(self.in_flight) | (self.blocked & self.owned.keys())

    def settled_parts(self) -> list[Owned]:
        """The owned partitions whose last commit is settled: the only ones a batch may
        touch (an unsettled one's bookkeeping belongs to its commit thread)."""
        return [o for k, o in self.owned.items() if k not in self.in_flight]

    def wait(self, keys: set[PartitionKey] | None = None) -> None:
        """Wait for the commits in flight of ``keys`` (None: every one); :meth:`settle` then
        settles them. Called before the group gives or takes partitions (in the rebalance
        callbacks, where a partition cannot be taken over again or the group rejoined), so
        that no partition is closed mid-commit."""
        wait_futures([f.commit for k, f in self.in_flight.items()
                      if f.commit is not None and (keys is None or k in keys)])

    def abandon(self) -> None:
        """Wait for the commits in flight and forget them (the worker is rebuilding its
        clients: partitions are resumed from their checkpoints, so what a batch left undone is
        done again by their next owner)."""
        self.wait()
        self.in_flight.clear()

    def settle(self, wait_s: float = SETTLE_WAIT_S) -> Stale:
        """Settle the partitions whose commits are done, waiting at most ``wait_s`` for the
        others (which stay in flight: :meth:`unsettled`): take aborted partitions over again
        (or rejoin, if fenced: :class:`router.base.errors.ProducerFenced` is raised), mark what was
        delivered, commit the resume offsets to the group, purge old identities now and then.
        A commit in flight for longer than ``stuck_s`` is given up and its partition taken over
        again as an aborted one (:meth:`_give_up_stuck`). Returns the records the next batch
        must not decide (consumed before a partition was taken over again: read again from
        its checkpoint)."""
        pending = [f.commit for f in self.in_flight.values() if f.commit is not None]
        if pending:
            wait_futures(pending, timeout=wait_s)
        # a parked partition's commit is settled once the group says whether it stays (it is
        # this worker's again, or closed once its commit is done: router.worker.assignment)
        done = {k: f for k, f in self.in_flight.items()
                if (f.commit is None or f.commit.done()) and self.parked.get(k) is not f.owned}
        for key in done:
            del self.in_flight[key]
        stuck = self._give_up_stuck()
        failed = Failed(set(stuck), set())
        told: set[int] = set()   # a slot's error is every one of its partitions': said once
        for key, f in done.items():
            error = None if f.commit is None else f.commit.result()
            if isinstance(error, BatchAborted | ProducerFenced) and id(error) not in told:
                told.add(id(error))
                (log.warning if isinstance(error, BatchAborted) else log.error)("%s", error)
            if isinstance(error, BatchAborted):
                failed.aborted.add(key)
            elif isinstance(error, ProducerFenced):
                failed.fenced.add(key)
            elif f.written:
                f.owned.durability.committed()
        return self._settle(done | stuck, failed)

    def _give_up_stuck(self) -> dict[PartitionKey, InFlight]:
        """Take the partitions whose commit has been in flight for longer than ``stuck_s`` out
        of flight, to be taken over again from their checkpoints. A producer whose transaction
        coordinator or output leader froze or died may keep waiting on that broker long after
        Kafka moved them (until its request times out, and again if it asked before the move,
        or until the broker comes back). The partition gets a new producer
        (router.durability.transactions.WorkerTransactions.replace), whose start aborts the stuck
        transaction and fences the old producer: the old commit can no longer land after the
        takeover reads the checkpoint and the output back, and if it landed before, the takeover
        reads it. Its commit thread's store flush is called off first (:class:`StoreFlush`),
        so the takeover may close the store. Parked partitions wait for the group
        (router.worker.assignment)."""
        if self.txn is None:
            return {}
        now = time.monotonic()
        stuck = {k: f for k, f in self.in_flight.items()
                 if f.commit is not None and not f.commit.done() and f.flush is not None
                 and now - f.issued > self.stuck_s and self.owned.get(k) is f.owned}
        for key, f in stuck.items():
            del self.in_flight[key]
            assert f.flush is not None
            f.flush.abandon(key)
            self.txn.replace(key)
            log.warning("partition %s/%d: its commit is still in flight after %.1fs (a broker "
                        "that froze or died); given up: a new producer aborts it, and the "
                        "partition is replayed from its checkpoint", key[0], key[1],
                        now - f.issued)
        return stuck

    def _settle(self, done: dict[PartitionKey, InFlight], failed: Failed) -> Stale:
        # A partition given up since (a rebalance moved it, or the worker rejoined) is no
        # longer this worker's to replay: only those still owned are taken over again.
        # A fenced commit of a partition given up since is the fencing doing its work: the
        # partition's new owner started its producer; nothing of this worker's is affected.
        if self.txn is not None:
            self.txn.release(done)
        mine = {k for k, f in done.items() if self.owned.get(k) is f.owned}
        failed = Failed(failed.aborted & mine, failed.fenced & mine)
        stale = self.recover(failed) if failed.aborted or failed.fenced else NOTHING_STALE
        commits: list[TopicPartition] = []
        for key, f in done.items():
            owned = f.owned
            if key in failed.aborted or self.owned.get(key) is not owned:
                continue  # taken over again (aborted), or given up since
            if self.txn is None:  # with transactions: flushed once committed (write_batch)
                flush_store(self.owned, key)
            owned.durability.batch_done()
            commits.extend(TopicPartition(t, owned.partition, o) for t, o in f.offsets.items())
        if commits and self.txn is None:   # with transactions: sent in them
            try:
                self.consumer().commit(offsets=commits, asynchronous=True)
            except KafkaException as exc:
                log.warning("offset commit: %s", exc)
        if time.monotonic() - self._last_purge > PURGE_EVERY_S or active("purge-every-batch"):
            self._purge()
        return stale

    def check_ownership(self, after_write: bool = False) -> None:
        """Refuse to write for partitions this worker may no longer own
        (router.durability.ownership). With transactions, not once the consumer failed fatally in
        this batch: its assignment then says nothing (the client dropped it), and what guards the
        partitions is the fencing of their producers by any newer owner, as for a parked partition
        (router.worker.assignment); the worker rebuilds its consumer right after the batch."""
        if self.txn is not None and self.consumer_failed():
            return
        assigned = {(tp.topic, tp.partition) for tp in self.consumer().assignment()}
        check_ownership(list(self.owned), {r: rt.settings.inputs for r, rt in self.routes.items()},
                        assigned, self.clock.since_poll(), self.clock.max_poll_s,
                        after_write=after_write)

    def _transaction_keys(self, busy: set[PartitionKey]) -> set[PartitionKey]:
        """The partitions in this batch's transactions: those with a checkpoint to write or
        output queued (a forward, dead letter or shadow copy marks its raw record undelivered
        in the partition's bookkeeping). Read from the owned partitions, not from the queued
        output: scanning the queue costs a tuple and a lookup per forwarded record."""
        return {key for key, o in self.owned.items()
                if (o.durability.dirty or o.durability.undelivered) and key not in busy}

    def _write_checkpoint_first(self, ckpts: list[Checkpoint]) -> None:
        """Without transactions: the checkpoint is durable before any output of the batch."""
        if ckpts:
            write_checkpoints(self.producer, self.ckpt_topic, ckpts)
            if self.writer.queue and fire("after-checkpoint"):
                os._exit(137)
        if self.writer.queue:
            self._send(None)
            pause_at("pause-before-commit")

    def _send(self, txn: WorkerTransactions | None, checked: bool = False) -> Sent:
        """Produce the batch's queued output (through the partitions' transactional
        producers, if any), checking ownership right before and after. Without transactions
        the output is waited for and checked here; with them each partition's commit thread
        does it (router.durability.transactions.write_batch), while this thread consumes the next
        batch. ``checked``: the end of every output partition was read in this batch already, before
        its first output was produced as decided (router.durability.inline_output, with
        transactions); the queued output (the records held back to be produced last, and what
        followed a stream that stopped on a produce error) is then not checked again. A second ask
        could not see more than the delivery check after it does: once the batch's transaction holds
        records in the partition, the last stable offset stops at the first of them. That
        saves the batch a ListOffsets round trip on the data path's thread."""
        self.check_ownership()  # again, as late as possible before writing
        parts = self.settled_parts()
        if not checked:
            unanswered = self.writer.fence_foreign_writes(parts)
            if unanswered:
                raise OutputWriteFailed(
                    f"the end of the output of partitions {sorted(unanswered)} could not be "
                    "read; refusing to write it unchecked")
        sent = self.writer.send(parts, None if txn is None else txn.producer_of)
        if txn is None:
            self.writer.settle(sent, lambda: self.clock.left(0.9))
        self.check_ownership(after_write=True)
        return sent

    def _purge(self) -> None:
        """Drop identities older than each partition's retention window from its store: the
        settled partitions' only. A partition with its commit in flight has its store flushed
        by its commit thread (:func:`flush_store`), and its open batch's identities must not
        reach the store before that commit (router.dedup.store.DedupStore.purge); it is purged
        at a later batch."""
        self._last_purge = time.monotonic()
        for owned in self.settled_parts():
            h = owned.router.horizon
            if h is not None:
                owned.store.purge(h - owned.route.settings.dedup.retention_ms)


def flush_store(owners: dict[PartitionKey, Owned], key: PartitionKey) -> None:
    """Make the partition's dedup store durable up to this batch: the identities of its
    delivered records and the checkpoint's seq. With transactions this runs in the
    partition's commit thread, after its commit, on the partition as the batch knew it
    (``owners``: a copy taken when the batch was written; the partition may be parked by a
    rebalance by then: router.worker.assignment)."""
    owned = owners[key]
    owned.store.put_meta("seq", str(owned.durability.seq).encode())
    owned.store.flush()
