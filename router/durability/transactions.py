"""Exactly-once output where the broker's transactions work: a few producers per worker.

A worker has one transactional producer per broker that leads its output partitions (a
*slot*; at most :data:`MAX_SLOTS`), ``transactional.id`` = ``<group_id>.<worker>.<slot>``.
Each batch binds every partition it writes to the slot of its output partition's leader, and
writes the partition's output, dead letters, shadow copies and checkpoint in that slot's
transaction. Why this shape (docs/decisions/019-a-few-producers-per-worker.md):

* a worker's producers, threads and connections grow with the brokers, not with the
  partitions it owns (a producer per partition cost ~4 threads and ~14 MB each);
* a frozen or dead broker holds the slot whose partitions it leads, not the others: a
  transaction waits on every partition it wrote, so one transaction per worker would let one
  broker hold every partition (docs/decisions/015-frozen-broker-holds-its-own-partitions.md).

Fencing a previous owner (KIP-447). Each transaction sends the resume offsets of its
partitions to the group with the consumer's group metadata (:meth:`WorkerTransactions.commit`),
after its records are all delivered: the group coordinator refuses them once the worker is no
longer a member of the group's generation, and the transaction aborts. The metadata is the
latest the data path noted (after each consume and at the start of each rebalance callback),
not that of the batch's consume: a rebalance bumps the generation under commits in flight,
and a stale one would abort them all. A blank member id (the client resets it when its
session is lost) is refused here, since the coordinator does not check a blank generation.
A previous owner that sent its offsets and froze before its commit, or whose partition was
revoked while its commit was in flight, is not stopped by that: the new owner waits for the
open transactions on its partitions' outputs and checkpoints to end, and fences their writers
by id after
:data:`router.durability.fencing.FENCE_GRACE_S` (router.durability.fencing), before it reads
anything back.

Failures: a retriable commit error (a timeout) is retried; one that requires an abort aborts,
and the slot's partitions are replayed from their checkpoints (:class:`BatchAborted`), as are
offsets refused for a generation the group has moved past; a fenced producer or instance id
(:class:`ProducerFenced`) means the partitions have a newer owner: the worker gives its
partitions up and rejoins the group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from cutover.broker_capabilities import serves_transactions
from cutover.kafka_errors import transactional_id_refused
from cutover.settings import RouterSettings, Transactions
from router.base.errors import (
    BatchAborted,
    FailpointHit,
    OutputWriteFailed,
    ProducerFenced,
    RouterConfigError,
    RouterError,
)
from router.base.failpoints import active, fire, pause_at, raise_at
from router.base.kafka_io import client_conf
from router.durability.checkpoint import Checkpoint, produce_checkpoint
from router.durability.output_writer import Sent
from router.durability.partition import Owned
from router.rule.oversize import DEFAULT_LIMIT, size_conf

log = logging.getLogger("cutover.router")

PartitionKey = tuple[str, int]   # (route, raw partition)

# At most this many producers per worker: brokers beyond share them (by broker id).
MAX_SLOTS = 8
# A commit that times out is asked again (it goes on in the background) for at most this long.
COMMIT_RETRY_S = 30.0
INIT_TIMEOUT_S = 30.0
# Commits run in a thread per slot; a commit given up as stuck (:meth:`replace`) keeps its
# thread until its broker answers or its retries run out, so the pool has room beside them.
COMMIT_THREADS = 2 * MAX_SLOTS
LEADER_ASKS = 3      # the leaders are asked this many times at most
COMMIT_FAILPOINT_S = 0.5   # how long the ``txn-commit-fails`` failpoint's commit takes
COMMIT_FAILPOINT_SLOW_S = 2.5   # ... and the ``txn-commit-fails-slowly`` one's
COMMIT_STALL_S = 10.0      # how long the ``txn-commit-stalls`` failpoint's commit waits
COMMIT_SLOW_S = 1.5        # how long each commit takes under ``txn-commits-slow``
# How long a producer lets its records gather before it sends them. A batch's output is
# visible only once its transaction commits, and the commit thread flushes it first
# (router.durability.output_writer.Sent.check), so the wait adds nothing a read_committed consumer
# sees (docs/decisions/010-transactional-output-as-decided.md).
LINGER_MS = 25

_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                     KafkaError.INVALID_PRODUCER_EPOCH,
                     KafkaError.TRANSACTION_COORDINATOR_FENCED})
# The group coordinator's refusals of a transaction's offsets (KIP-447). Another process with
# this worker's instance id: fenced, the worker rejoins. A generation or member id the group
# no longer has: the batch aborts and its partitions are replayed from their checkpoints,
# since a rebalance bumps the generation under the commits of partitions that stay (a
# partition that moved is then revoked, parked or lost in the data path's next consume, and
# not replayed).
_FENCED_MEMBER = frozenset({KafkaError.FENCED_INSTANCE_ID})


def transactions_on(settings: RouterSettings) -> bool:
    """The ``transactions`` setting, with ``auto`` decided by asking the broker what it serves."""
    if settings.transactions is Transactions.AUTO:
        return serves_transactions(client_conf(settings, "admin"))
    return settings.transactions is Transactions.ON


def transactional_id(group_id: str, worker: str, slot: int) -> str:
    return f"{group_id}.{worker}.{slot}"


def slot_ids(group_id: str, worker: str) -> list[str]:
    """Every transactional id a worker may write with."""
    return [transactional_id(group_id, worker, s) for s in range(MAX_SLOTS)]


def slot_of_broker(broker: int) -> int:
    """The slot that writes the partitions a broker leads (-1, no leader known: slot 0)."""
    return max(broker, 0) % MAX_SLOTS


def is_fenced(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (
        err.code() in _FENCED or err.code() in _FENCED_MEMBER or err.fatal())


@dataclass(eq=False)
class Slot:
    """One transactional producer of the worker, and the state of its transaction."""

    index: int
    producer: Producer
    open: bool = False         # a transaction is begun and not yet handed to a commit thread
    committing: bool = False   # its commit thread runs


class WorkerTransactions:
    """The transactional producers of one worker, and which partition writes through which."""

    def __init__(self, settings: RouterSettings, record_limits: dict[str, int],
                 worker_id: str, new_producer: Callable[[dict[str, Any]], Producer] = Producer
                 ) -> None:
        """``record_limits``: route -> the largest record its producers take
        (router.rule.oversize); ``new_producer``: makes a slot's producer from its settings
        (the worker's lets the compiled path produce into it: router.native.compiled)."""
        self.settings = settings
        self.new_producer = new_producer
        self.worker_id = worker_id
        self.record_limit = min(record_limits.values(), default=DEFAULT_LIMIT)
        self.slots: dict[int, Slot] = {}
        # Partitions bound to a slot: from the first write of a batch until that batch is
        # settled (:meth:`release`); the commit of a slot covers its bound partitions.
        self.bound: dict[PartitionKey, Slot] = {}
        self.planned: dict[PartitionKey, int] = {}   # :meth:`plan`
        # Slots given up (:meth:`replace`, :meth:`reset`) whose transaction may still be open:
        # the next :meth:`start` starts them again, which aborts it, led partitions or not.
        self.to_restart: set[int] = set()
        self.leaders: dict[tuple[str, int], int] = {}   # (output topic, partition) -> broker
        self.pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="txn-commit")
        self.background = ThreadPoolExecutor(1, thread_name_prefix="txn-leaders")
        self._refreshing = threading.Lock()
        self.route_of: dict[str, str] = {}   # output / dead-letter / shadow topic -> route
        self.output_of: dict[str, str] = {}  # route -> output topic
        for rs in settings.routes:
            self.output_of[rs.name] = rs.output
            for topic in (rs.output, rs.dead_letter, rs.shadow):
                if topic is not None:
                    self.route_of[topic] = rs.name

    # -- producers --------------------------------------------------------------------------

    def start(self) -> None:
        """Start a producer for every broker that leads an output partition (in parallel;
        each start is round trips to its transaction coordinator). ``init_transactions``
        aborts this worker's own open transactions of a previous run (same ids: a worker
        restarted with its instance id), so call it before reading anything back."""
        if not self.leaders:
            self._ask_leaders()
        todo = sorted(({slot_of_broker(b) for b in self.leaders.values()} | self.to_restart)
                      - set(self.slots)) or ([0] if not self.slots else [])
        if not todo:
            return
        with ThreadPoolExecutor(len(todo), thread_name_prefix="txn-start") as starts:
            started = list(starts.map(self._start, todo))
        errors = [error for _, error in started if error is not None]
        for index, (producer, _) in zip(todo, started, strict=True):
            if not errors:
                self.slots[index] = Slot(index, producer)
            else:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge(in_queue=True, in_flight=True, blocking=False)
        if errors:
            raise errors[0]
        self.to_restart -= set(todo)
        log.info("transactional producers started: slots %s", sorted(self.slots))

    def _start(self, index: int) -> tuple[Producer, Exception | None]:
        """One slot's transactional producer, initialised; or the error that refused it."""
        tid = transactional_id(self.settings.group_id, self.worker_id, index)
        conf = client_conf(self.settings, "producer",
                           **{"transactional.id": tid,
                              "linger.ms": LINGER_MS, "batch.num.messages": 10000,
                              "queue.buffering.max.messages": 1_000_000, "acks": "all",
                              **size_conf(self.record_limit)})
        producer = self.new_producer(conf)
        try:
            producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            if not transactional_id_refused(exc.args[0]):
                return producer, exc
            return producer, RouterConfigError(
                f"the broker refuses this worker the transactional id {tid}: grant its "
                f"principal Write on the transactional ids with the prefix "
                f"'{self.settings.group_id}.' "
                '(docs/security.md, "Access control"; `cutover doctor` checks it), or set '
                "transactions: off")
        return producer, None

    def _ask_leaders(self) -> None:
        """The leader of every partition of the output topics, from the cluster's metadata."""
        topics = sorted(set(self.output_of.values()))
        probe = next(iter(self.slots.values())).producer if self.slots else None
        owner = probe or Producer(client_conf(self.settings, "producer"))
        leaders = dict(self.leaders)
        try:
            for topic in topics:
                for attempt in range(1, LEADER_ASKS + 1):
                    try:
                        meta = owner.list_topics(topic, timeout=self.settings.request_timeout_s)
                        break
                    except KafkaException as exc:
                        if attempt == LEADER_ASKS:
                            log.info("leaders of %s not known (%s)", topic, exc)
                            meta = None
                if meta is None or topic not in meta.topics:
                    continue
                for p, pm in meta.topics[topic].partitions.items():
                    leaders[(topic, p)] = pm.leader
        finally:
            if probe is None:
                owner.flush(0)
        # one assignment: the data path reads the map while a refresh runs in the background
        self.leaders = leaders

    def refresh_leaders(self, keys: Iterable[PartitionKey], timeout_s: float) -> None:
        """Ask for the output topics' leaders again, in the background: after a broker froze or
        died, a producer learns that Kafka moved its partitions' leaders only when a request to
        the old leader times out, and a batch produced meanwhile goes to the old leader and
        waits for that timeout too. The answer updates every slot's metadata (each asks) and
        the binding of the next batches (:meth:`slot_for`). ``keys``: the partitions that gave
        a sign; one refresh serves them all."""
        if not list(keys) or not self._refreshing.acquire(blocking=False):
            return   # one at a time: errors reported at every reconnect would queue many

        def refresh() -> None:
            try:
                for slot in list(self.slots.values()):
                    for topic in sorted(set(self.route_of)):
                        with contextlib.suppress(KafkaException):
                            slot.producer.list_topics(topic, timeout=timeout_s)
                self._ask_leaders()
            finally:
                self._refreshing.release()

        self.background.submit(refresh)

    def replace(self, key: PartitionKey) -> None:
        """Give up the producer of ``key``'s slot while its commit is still in flight (stuck on
        a broker Kafka has fenced, frozen or gone): the slot's next start (:meth:`start`, run
        by the takeover that replays its partitions) makes a new producer with the same
        ``transactional.id``, whose ``init_transactions`` aborts the stuck transaction and
        fences the old producer, whatever its commit thread does when its broker answers. The
        old producer is not purged or closed here: its commit thread still holds it."""
        slot = self.bound.pop(key, None)
        if slot is not None and self.slots.get(slot.index) is slot:
            del self.slots[slot.index]
            self.to_restart.add(slot.index)

    def reset(self) -> None:
        """Forget every producer (the worker is rebuilding its clients): what they still hold
        is purged; their open transactions are aborted by the next :meth:`start` (same ids) or
        by a newer owner's fencing (router.durability.fencing)."""
        for slot in self.slots.values():
            with contextlib.suppress(KafkaException, RuntimeError):
                slot.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.to_restart |= set(self.slots)
        self.slots.clear()
        self.bound.clear()

    def close(self) -> None:
        for slot in self.slots.values():
            if not slot.committing:
                with contextlib.suppress(KafkaException, RuntimeError):
                    if slot.open:
                        slot.producer.abort_transaction(5)
                    slot.producer.flush(5)
        self.slots.clear()
        self.bound.clear()
        self.pool.shutdown()
        self.background.shutdown(wait=False, cancel_futures=True)

    # -- binding ----------------------------------------------------------------------------

    def slot_for(self, key: PartitionKey) -> int:
        """The slot ``key`` writes through: the one bound, else the one planned for this batch
        (:meth:`plan`), else that of its output partition's leader."""
        slot = self.bound.get(key)
        if slot is not None:
            return slot.index
        planned = self.planned.get(key)
        if planned is not None:
            return planned
        return slot_of_broker(self.leaders.get((self.output_of[key[0]], key[1]), -1))

    def plan(self, keys: Iterable[PartitionKey]) -> set[PartitionKey]:
        """At a batch's start: the slot each of ``keys`` not bound will write through in it (its
        output partition's leader's, as known now: a refresh of the leaders during the batch
        does not move a partition between slots), and the partitions whose slot is committing,
        none of whose records may be decided until it ends (their next transaction would be
        the slot's, which is not open)."""
        leaders = self.leaders
        self.planned = {k: slot_of_broker(leaders.get((self.output_of[k[0]], k[1]), -1))
                        for k in keys if k not in self.bound}
        busy = {i for i, s in self.slots.items() if s.committing}
        return {k for k in self.planned if self.planned[k] in busy} | \
            {k for k, s in self.bound.items() if s.committing}

    def producer_of_key(self, key: PartitionKey) -> Producer:
        """The producer ``key`` writes through in this batch; binds it (:meth:`begin` opens
        the transaction)."""
        slot = self.bound.get(key)
        if slot is None:
            index = self.slot_for(key)
            slot = self.slots.get(index)
            if slot is None:
                self.start_slot(index)
                slot = self.slots[index]
            self.bound[key] = slot
        return slot.producer

    def start_slot(self, index: int) -> None:
        producer, error = self._start(index)
        if error is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                producer.purge(in_queue=True, in_flight=True, blocking=False)
            raise error
        self.slots[index] = Slot(index, producer)
        self.to_restart.discard(index)

    def producer_of(self, topic: str, partition: int) -> Producer:
        """The producer a record of ``topic`` (output, dead letter, shadow) of ``partition``
        goes through: that of its partition's slot."""
        return self.producer_of_key((self.route_of[topic], partition))

    def release(self, keys: Iterable[PartitionKey]) -> None:
        """Unbind partitions whose batch is settled (or given up): their next batch binds them
        to their leader's slot again."""
        for key in keys:
            self.bound.pop(key, None)

    # -- one batch --------------------------------------------------------------------------

    def begin(self, keys: Iterable[PartitionKey]) -> None:
        """Bind ``keys`` and begin their slots' transactions not begun yet in this batch (a
        partition whose output is produced as decided began before the batch's end:
        router.durability.inline_output)."""
        for key in keys:
            self.producer_of_key(key)
            slot = self.bound[key]
            if not slot.open:
                if slot.committing:
                    raise BatchAborted(f"partition {key[0]}/{key[1]}: its producer's last "
                                       "commit is still in flight")
                slot.producer.begin_transaction()
                slot.open = True

    def by_slot(self, keys: Iterable[PartitionKey]) -> dict[int, list[PartitionKey]]:
        out: dict[int, list[PartitionKey]] = {}
        for key in sorted(keys):
            out.setdefault(self.bound[key].index, []).append(key)
        return out

    def abort(self, keys: Iterable[PartitionKey]) -> set[PartitionKey]:
        """Abort the open transactions of ``keys``' slots; return the keys whose producer is
        fenced."""
        fenced: set[PartitionKey] = set()
        groups: dict[int, list[PartitionKey]] = {}
        for key in keys:
            slot = self.bound.get(key)
            if slot is not None:
                groups.setdefault(slot.index, []).append(key)
        for members in groups.values():
            slot = self.bound[members[0]]
            if slot.open and self._abort(slot):
                fenced.update(members)
        return fenced

    def _abort(self, slot: Slot) -> bool:
        """Abort the slot's transaction; True if its producer is fenced (or its state unknown:
        its partitions are given up and taken again). An error the client calls retriable (a
        timeout: the abort goes on in the background) is asked again, as librdkafka's
        ``rd_kafka_abort_transaction`` documents, within ``INIT_TIMEOUT_S`` in all."""
        slot.open = False
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while True:
            try:
                slot.producer.abort_transaction(max(deadline - time.monotonic(), 1.0))
                return False
            except KafkaException as exc:
                err = exc.args[0]
                if is_fenced(exc):
                    return True
                if err.code() == KafkaError._STATE:  # no transaction was open
                    return False
                if err.retriable() and time.monotonic() < deadline:
                    log.warning("slot %d: abort: %s; asked again", slot.index, err.str())
                    time.sleep(0.1)
                    continue
                log.warning("slot %d: abort: %s", slot.index, err.str())
                return True

    def commit(self, slot: Slot, keys: list[PartitionKey], sent: Sent | None,
               written: dict[PartitionKey, Owned], offsets: list[TopicPartition],
               group: Callable[[], bytes | None], timeout_s: float) -> RouterError | None:
        """In the slot's commit thread: wait for its output and check it (router
        .output_writer.Sent.check), send the partitions' resume offsets to the group with
        ``group()`` (the consumer's group metadata as the data path last noted it; None: not a
        member), commit. Return why it failed (after aborting), or None."""
        name = f"partitions {', '.join(f'{r}/{p}' for r, p in keys)}"
        try:
            if sent is not None:
                for key in keys:
                    sent.check(written.get(key), slot.producer, timeout_s)
                raise_at("txn-after-send")
            if offsets:
                metadata = group()
                if metadata is None:
                    raise OutputWriteFailed("the worker is not a member of its group now: its "
                                            "ownership of the batch's partitions is not proven")
                slot.producer.send_offsets_to_transaction(offsets, metadata, timeout_s)
        except (KafkaException, OutputWriteFailed, FailpointHit) as exc:
            message = f"{name}: {exc}; the batch was aborted"
            fenced = isinstance(exc, KafkaException) and is_fenced(exc)
            if self._abort(slot) or fenced:
                return ProducerFenced(message)
            return BatchAborted(message)
        try:
            self._commit(slot, name, keys)
        except (BatchAborted, ProducerFenced) as exc:
            return exc
        return None

    def _commit(self, slot: Slot, name: str, keys: list[PartitionKey]) -> None:
        """Commit the slot's transaction. A retriable error (a timeout) is asked again, unless
        the slot's producer was replaced meanwhile (:meth:`replace`); raise
        :class:`ProducerFenced` or :class:`BatchAborted` (after aborting) otherwise."""
        deadline = time.monotonic() + COMMIT_RETRY_S
        timeout = commit_timeout_s()
        if fire("txn-commit-stalls"):
            time.sleep(COMMIT_STALL_S)  # a transaction coordinator that does not answer
        if active("txn-commits-slow") and any(p == 0 for _, p in keys):
            time.sleep(COMMIT_SLOW_S)
        while True:
            slowly = fire("txn-commit-fails-slowly")
            if slowly or fire("txn-commit-fails"):
                # a slow coordinator: the next consume returns; slowly, the data path sets the
                # partitions aside meanwhile
                time.sleep(COMMIT_FAILPOINT_SLOW_S if slowly else COMMIT_FAILPOINT_S)
                self._abort(slot)
                failpoint = "txn-commit-fails-slowly" if slowly else "txn-commit-fails"
                raise BatchAborted(f"{name}: commit failed (failpoint {failpoint}); the batch was "
                                   "aborted")
            try:
                slot.producer.commit_transaction(timeout)
                slot.open = False
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if is_fenced(exc):
                    slot.open = False
                    raise ProducerFenced(f"{name}: {err.str()}") from None
                if self.slots.get(slot.index) is not slot:
                    # given up as stuck (:meth:`replace`): the new producer's start aborts
                    # this transaction; asking again or aborting here would only wait
                    raise BatchAborted(f"{name}: commit given up ({err.str()})") from None
                if err.retriable() and not err.txn_requires_abort() \
                        and time.monotonic() < deadline:
                    log.warning("%s: commit did not complete (%s); asking again", name,
                                err.str())
                    timeout = max(deadline - time.monotonic(), 0.1)
                    continue
                self._abort(slot)
                raise BatchAborted(f"{name}: commit failed ({err.str()}); the batch was "
                                   "aborted") from None


class Failed(NamedTuple):
    """The partitions of a batch that did not commit."""

    aborted: set[PartitionKey]   # replayed from their checkpoints
    fenced: set[PartitionKey]    # a newer owner has them


@dataclass
class Commits:
    """A batch's commits, issued (one per slot, each in a thread of its own, followed there by
    its partitions' store flushes) and not waited for yet
    (router.durability.batch_end.BatchEnd.settle). Why not wait at once: a commit is round trips to
    the transaction coordinator, in which the worker can already consume the next batch
    (router.durability.batch_end). ``futures``: each partition's, in ``order`` (the partitions of
    one slot share theirs)."""

    order: list[PartitionKey]
    futures: list[Future[RouterError | None]]
    written: list[Owned]   # partitions whose output partition the batch wrote


@dataclass(frozen=True)
class BatchWrite:
    """What a batch's transactions write besides the queued output."""

    ckpt_topic: str
    ckpts: list[Checkpoint]
    keys: set[PartitionKey]
    group: Callable[[], bytes | None]   # the group metadata last noted (None: not a member)


def write_batch(txn: WorkerTransactions, batch: BatchWrite, queued: bool,
                send: Callable[[], Sent], timeout_s: float,
                settle: Callable[[PartitionKey], None]) -> Failed | Commits:
    """One transaction per slot of the batch's partitions: their checkpoints, then ``send()``
    (the output writer's produce, with the ownership checks; nothing waited for), then in a
    thread per slot: its output waited for (at most ``timeout_s``) and checked, the offsets
    sent to the group, its commit, and ``settle(key)`` of each of its partitions once it
    committed (the dedup store flush). The commits are returned in flight (:class:`Commits`);
    a batch aborted before them returns its :class:`Failed` at once."""
    keys = batch.keys
    sent: Sent | None = None
    try:
        txn.begin(keys)
        if queued:
            raise_at("txn-before-send")
        for ck in batch.ckpts:
            produce_checkpoint(txn.producer_of_key((ck.route, ck.partition)), batch.ckpt_topic,
                               ck)
        if queued and fire("after-checkpoint"):
            for slot in {txn.bound[k].index: txn.bound[k] for k in keys}.values():
                slot.producer.flush(30)
            os._exit(137)
        if queued:
            sent = send()
            pause_at("pause-before-commit", lambda: [
                s.producer.flush(30) for s in {txn.bound[k].index: txn.bound[k]
                                               for k in keys}.values()])
    except (KafkaException, OutputWriteFailed, FailpointHit, BatchAborted) as exc:
        log.warning("batch aborted before its commit (%s)", exc)
        if is_fenced(exc):
            # a producer fenced (or failed fatally) before its transaction began: nothing of it
            # can be aborted or begun again; the worker rejoins and starts its producers anew
            txn.abort(keys)
            return Failed(set(), set(keys))
        fenced = txn.abort(keys)
        return Failed(keys - fenced, fenced)
    written = {} if sent is None else \
        {(o.route.settings.name, o.partition): o for o in sent.writing}
    resume = {(c.route, c.partition): c.offsets for c in batch.ckpts}
    futures: dict[PartitionKey, Future[RouterError | None]] = {}
    for index, members in txn.by_slot(keys).items():
        slot = txn.bound[members[0]]
        offsets = [TopicPartition(t, p, o) for (r, p) in members
                   for t, o in sorted(resume.get((r, p), {}).items())]

        def commit_then_settle(slot: Slot = slot, members: list[PartitionKey] = members,
                               offsets: list[TopicPartition] = offsets) -> RouterError | None:
            try:
                error = txn.commit(slot, members, sent, written, offsets, batch.group,
                                   timeout_s)
                if error is None:
                    for key in members:
                        settle(key)
                    if any(key in written for key in members) and fire("exit-after-commit"):
                        os._exit(137)
                return error
            finally:
                slot.committing = False

        slot.committing = True
        slot.open = False
        future = txn.pool.submit(commit_then_settle)
        futures.update(dict.fromkeys(members, future))
        log.debug("slot %d: committing %d partitions", index, len(members))
    order = sorted(keys)
    return Commits(order, [futures[k] for k in order], list(written.values()))


def commit_timeout_s() -> float:
    """The first commit's timeout; the ``txn-commit-timeout`` seam makes it expire at once."""
    return 0.0 if fire("txn-commit-timeout") else 30.0
