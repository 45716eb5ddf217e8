"""Exactly-once output where the broker's transactions work: one transaction per partition batch.

Each owned raw partition has a transactional producer of its own, ``transactional.id`` =
``<group_id>.<route>.<partition>``; a batch's output, dead letters, shadow copies and
checkpoint of that partition are written in one transaction of it. Why one per raw partition,
and not one per worker fenced through ``send_offsets_to_transaction`` (KIP-447):

* the new owner of a partition calls ``init_transactions`` with the same id before it reads
  the checkpoint and the output back: the coordinator aborts the previous owner's open
  transaction and fences its producer, whatever step it froze at. Under KIP-447 the group
  generation is checked only when the offsets are sent; a worker that froze after that and
  before its commit can still commit after its partitions moved;
* a worker killed mid-batch leaves an open transaction that holds back every read_committed
  consumer of its output partitions. Under the partition's id it is aborted by the takeover,
  within seconds; under a worker's id it would stay until ``transaction.timeout.ms`` and the
  coordinator's abort scan (60 s and 10 s by default), and failover would take that long.

The cost is a producer per owned partition and one commit per written partition per batch
(docs/performance.md gives the throughput with and without). Failures: a retriable commit error
(a timeout) is retried; one that requires an abort aborts, and the partition is replayed from
its checkpoint (:class:`BatchAborted`); a fenced producer (:class:`ProducerFenced`) means the
partition has a newer owner: the worker gives its partitions up and rejoins the group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from cutover.broker_capabilities import serves_transactions
from cutover.kafka_errors import transactional_id_refused
from cutover.settings import RouterSettings, Transactions
from router.checkpoint import Checkpoint, produce_checkpoint
from router.errors import (
    BatchAborted,
    FailpointHit,
    OutputWriteFailed,
    ProducerFenced,
    RouterConfigError,
    RouterError,
)
from router.failpoints import ARMED, active, fire, pause_at, raise_at
from router.kafka_io import client_conf
from router.output_writer import Sent
from router.oversize import DEFAULT_LIMIT, size_conf
from router.partition import Owned

log = logging.getLogger("cutover.router")

PartitionKey = tuple[str, int]   # (route, raw partition)

# A commit that times out is asked again (it goes on in the background) for at most this long.
COMMIT_RETRY_S = 30.0
INIT_TIMEOUT_S = 30.0
# Commits run in a thread each: the owned partitions' at once, and a commit given up as stuck
# (:meth:`PartitionTransactions.replace`) keeps its thread until its broker answers or its
# retries run out, so the pool has room beside them.
COMMIT_THREADS = 32
START_THREADS = 64   # producers started at once on a takeover
LEADER_THREADS = 8   # producers asked for their leaders at once (in the background)
LEADER_ASKS = 3      # ... each asked this many times at most
COMMIT_FAILPOINT_S = 0.5   # how long the ``txn-commit-fails`` failpoint's commit takes
COMMIT_FAILPOINT_SLOW_S = 2.5   # ... and the ``txn-commit-fails-slowly`` one's
COMMIT_STALL_S = 10.0      # how long the ``txn-commit-stalls`` failpoint's commit waits
COMMIT_SLOW_S = 1.5        # how long each commit takes under ``txn-commits-slow``
# How long a partition's producer lets its records gather before it sends them. A batch's
# output is visible only once its transaction commits, and the commit thread flushes it first
# (router.output_writer.Sent.check), so the wait adds nothing a read_committed consumer sees.
# Shorter, each producer sends many small requests whose broker CPU competes with the router's;
# longer, the sending waits for the batch's end. 25 ms sends part of a batch while it is still
# being decided, in few requests (docs/decisions/010-transactional-output-as-decided.md).
LINGER_MS = 25

_FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                     KafkaError.INVALID_PRODUCER_EPOCH,
                     KafkaError.TRANSACTION_COORDINATOR_FENCED})


def transactions_on(settings: RouterSettings) -> bool:
    """The ``transactions`` setting, with ``auto`` decided by asking the broker what it serves."""
    if settings.transactions is Transactions.AUTO:
        return serves_transactions(client_conf(settings, "admin"))
    return settings.transactions is Transactions.ON


def transactional_id(group_id: str, route: str, partition: int) -> str:
    return f"{group_id}.{route}.{partition}"


def is_fenced(exc: BaseException) -> bool:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and (err.code() in _FENCED or err.fatal())


class PartitionTransactions:
    """The transactional producers of the partitions this worker owns."""

    def __init__(self, settings: RouterSettings, record_limits: dict[str, int]) -> None:
        """``record_limits``: route -> the largest record its producers take
        (router.oversize)."""
        self.settings = settings
        self.record_limits = record_limits
        self.producers: dict[PartitionKey, Producer] = {}
        self.open: set[PartitionKey] = set()   # begun in this batch
        self.pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="txn-commit")
        self.leaders = ThreadPoolExecutor(LEADER_THREADS, thread_name_prefix="txn-leaders")
        self._refreshing: set[PartitionKey] = set()   # a refresh of theirs is queued or running
        self.route_of: dict[str, str] = {}   # output / dead-letter / shadow topic -> route
        for rs in settings.routes:
            for topic in (rs.output, rs.dead_letter, rs.shadow):
                if topic is not None:
                    self.route_of[topic] = rs.name

    # -- ownership --------------------------------------------------------------------------

    def take(self, keys: Iterable[PartitionKey]) -> None:
        """Start the producers of partitions taken over. ``init_transactions`` aborts the
        previous owner's open transaction and fences it: call before reading anything back.
        The partitions' producers start in parallel (each start is round trips to its
        transaction coordinator, and a takeover of many partitions would otherwise wait for
        them one after the other)."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.producers]
        if not todo:
            return
        # all at once, not in waves of the commit pool's size: a start is round trips, not CPU
        with ThreadPoolExecutor(min(len(todo), START_THREADS),
                                thread_name_prefix="txn-start") as starts:
            started = list(starts.map(self._start, todo))
        refused = [k for k, (_, error) in zip(todo, started, strict=True) if error is not None]
        for key, (producer, _) in zip(todo, started, strict=True):
            if not refused:
                self.producers[key] = producer
            else:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge(in_queue=True, in_flight=True, blocking=False)
        if refused:
            error = started[todo.index(refused[0])][1]
            assert error is not None
            raise error

    def _start(self, key: PartitionKey) -> tuple[Producer, Exception | None]:
        """One partition's transactional producer, initialised; or the error that refused
        it."""
        route, p = key
        producer = Producer(client_conf(
            self.settings, "producer",
            **{"transactional.id": transactional_id(self.settings.group_id, route, p),
               "linger.ms": LINGER_MS, "batch.num.messages": 10000,
               "queue.buffering.max.messages": 1_000_000, "acks": "all",
               **size_conf(self.record_limits.get(route, DEFAULT_LIMIT))}))
        try:
            producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            if not transactional_id_refused(exc.args[0]):
                return producer, exc
            return producer, RouterConfigError(
                f"the broker refuses this worker the transactional id "
                f"{transactional_id(self.settings.group_id, route, p)}: grant its principal "
                f"Write on the transactional ids with the prefix '{self.settings.group_id}.' "
                '(docs/security.md, "Access control"; `cutover doctor` checks it), or set '
                "transactions: off")
        return producer, None

    def drop(self, keys: Iterable[PartitionKey], discard: bool = False) -> None:
        """Close the producers of partitions given up (between batches: none is open).
        ``discard``: the worker is rebuilding its clients; what a producer still holds is
        purged, not waited for (its open transaction, if any, is aborted by the partition's
        next ``init_transactions``, ours or a newer owner's)."""
        for key in keys:
            self.open.discard(key)
            producer = self.producers.pop(key, None)
            if producer is None:
                continue
            if discard:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge(in_queue=True, in_flight=True, blocking=False)
                continue
            try:
                producer.flush(5)
            except KafkaException as exc:  # fenced: it has nothing left to deliver
                log.info("partition %s/%d: producer closed (%s)", key[0], key[1], exc)

    def close(self) -> None:
        self.drop(list(self.producers))
        self.pool.shutdown()
        self.leaders.shutdown(wait=False, cancel_futures=True)

    def replace(self, key: PartitionKey) -> None:
        """Give up the partition's producer while its commit is still in flight (stuck on a
        broker Kafka has fenced, frozen or gone): the next :meth:`take` of ``key`` starts a new
        producer with the same ``transactional.id``, whose ``init_transactions`` aborts the
        stuck transaction and fences the old producer, whatever its commit thread does when its
        broker answers (router.batch_end). The old producer is not purged or closed here: its
        commit thread still holds it, and a call on it from this thread would conflict with
        the commit in progress."""
        self.open.discard(key)
        self.producers.pop(key, None)

    def refresh_leaders(self, keys: Iterable[PartitionKey], timeout_s: float) -> None:
        """Have the producers of ``keys`` ask for the leaders of the topics they write (a
        metadata request each), in the background: after a broker froze or died, a producer
        learns that Kafka moved its partitions' leaders only when a request to the old leader
        times out, and a batch produced meanwhile goes to the old leader and waits for that
        timeout too. The answer updates the producer's own metadata."""
        def refresh(key: PartitionKey, producer: Producer) -> None:
            try:
                ask(key, producer)
            finally:
                self._refreshing.discard(key)

        def ask(key: PartitionKey, producer: Producer) -> None:
            for topic in sorted(t for t, r in self.route_of.items() if r == key[0]):
                # the client asks any broker it is connected to: the frozen one, maybe, so a
                # request unanswered is asked again (of another, likely)
                for attempt in range(1, LEADER_ASKS + 1):
                    try:
                        producer.list_topics(topic, timeout=timeout_s)
                        break
                    except KafkaException as exc:
                        if attempt == LEADER_ASKS:
                            log.info("partition %s/%d: leaders of %s not refreshed (%s)",
                                     key[0], key[1], topic, exc)
                            return

        # a key already being refreshed is not queued again: errors a consumer reports at every
        # reconnect to a dead broker would otherwise queue refreshes faster than they end
        for key in sorted(set(keys) - self._refreshing):
            producer = self.producers.get(key)
            if producer is not None:
                self._refreshing.add(key)
                self.leaders.submit(refresh, key, producer)

    # -- one batch --------------------------------------------------------------------------

    def producer_of(self, topic: str, partition: int) -> Producer:
        """The producer of the partition a record of ``topic`` (output, dead letter, shadow)
        belongs to."""
        return self.producers[(self.route_of[topic], partition)]

    def begin(self, keys: Iterable[PartitionKey]) -> None:
        """Begin the transactions of ``keys`` not begun yet in this batch (a partition whose
        output is produced as decided began before the batch's end: router.inline_output)."""
        for key in keys:
            if key not in self.open:
                self.producers[key].begin_transaction()
                self.open.add(key)

    def flush(self, keys: Iterable[PartitionKey]) -> None:
        for key in keys:
            self.producers[key].flush(30)

    def try_deliver(self, key: PartitionKey, producer: Producer, sent: Sent,
                    owned: Owned | None, timeout_s: float) -> RouterError | None:
        """Wait for the partition's output of the batch and check it (router.output_writer
        .Sent.check); abort the partition's transaction if it failed, and return why.
        ``producer``: the one the batch's transaction began on (the partition may have a new
        one by now: :meth:`replace`)."""
        try:
            sent.check(owned, producer, timeout_s)
            raise_at("txn-after-send")
        except (KafkaException, OutputWriteFailed, FailpointHit) as exc:
            message = f"partition {key[0]}/{key[1]}: {exc}; the batch was aborted"
            if self._abort(key, producer):
                return ProducerFenced(message)
            return BatchAborted(message)
        return None

    def try_commit(self, key: PartitionKey, producer: Producer) -> RouterError | None:
        """:meth:`commit`, its failure returned (the partitions commit in parallel: a
        commit is a round trip to the transaction coordinator, and the client releases the
        interpreter while it waits)."""
        try:
            self.commit(key, producer)
        except (BatchAborted, ProducerFenced) as exc:
            return exc
        return None

    def _done(self, key: PartitionKey, producer: Producer) -> None:
        """The partition's transaction on ``producer`` is over (unless the partition has a new
        producer since, whose transaction is not this one)."""
        if self.producers.get(key) is producer:
            self.open.discard(key)

    def commit(self, key: PartitionKey, producer: Producer) -> None:
        """Commit one partition's transaction. A retriable error (a timeout) is asked again,
        unless the partition's producer was replaced meanwhile (:meth:`replace`); raise
        :class:`ProducerFenced` or :class:`BatchAborted` (after aborting) otherwise."""
        deadline = time.monotonic() + COMMIT_RETRY_S
        timeout = commit_timeout_s()
        if fire("txn-commit-stalls"):
            time.sleep(COMMIT_STALL_S)  # a transaction coordinator that does not answer
        if key[1] == 0 and active("txn-commits-slow"):
            time.sleep(COMMIT_SLOW_S)
        while True:
            slowly = fire("txn-commit-fails-slowly")
            if slowly or fire("txn-commit-fails"):
                # a slow coordinator: the next consume returns; slowly, the data path sets the
                # partition aside meanwhile
                time.sleep(COMMIT_FAILPOINT_SLOW_S if slowly else COMMIT_FAILPOINT_S)
                self._abort(key, producer)
                raise BatchAborted(f"partition {key[0]}/{key[1]}: commit failed (failpoint "
                                   f"{ARMED}); the batch was aborted")
            try:
                producer.commit_transaction(timeout)
                self._done(key, producer)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if is_fenced(exc):
                    self._done(key, producer)
                    raise ProducerFenced(f"partition {key[0]}/{key[1]}: {err.str()}") from None
                if self.producers.get(key) is not producer:
                    # given up as stuck (:meth:`replace`): the new producer's start aborts
                    # this transaction; asking again or aborting here would only wait
                    raise BatchAborted(f"partition {key[0]}/{key[1]}: commit given up "
                                       f"({err.str()})") from None
                if err.retriable() and not err.txn_requires_abort() \
                        and time.monotonic() < deadline:
                    log.warning("partition %s/%d: commit did not complete (%s); asking again",
                                key[0], key[1], err.str())
                    # the same commit resumed, bounded: an unbounded wait on a coordinator
                    # that never answers would hold the worker for good
                    timeout = max(deadline - time.monotonic(), 0.1)
                    continue
                self._abort(key, producer)
                raise BatchAborted(f"partition {key[0]}/{key[1]}: commit failed "
                                   f"({err.str()}); the batch was aborted") from None

    def abort(self, keys: Iterable[PartitionKey]) -> set[PartitionKey]:
        """Abort the open transactions of ``keys``; return those whose producer is fenced."""
        return {key for key in keys
                if (producer := self.producers.get(key)) is not None
                and self._abort(key, producer)}

    def _abort(self, key: PartitionKey, producer: Producer) -> bool:
        """Abort the partition's transaction on ``producer``; True if that producer is fenced
        (or its state unknown: the partition is given up and taken again)."""
        self._done(key, producer)
        try:
            producer.abort_transaction(INIT_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            if is_fenced(exc):
                return True
            if err.code() != KafkaError._STATE:  # _STATE: no transaction was open
                log.warning("partition %s/%d: abort: %s", key[0], key[1], err.str())
                return True
        return False


class Failed(NamedTuple):
    """The partitions of a batch that did not commit."""

    aborted: set[PartitionKey]   # replayed from their checkpoints
    fenced: set[PartitionKey]    # a newer owner has them


def write_batch(txn: PartitionTransactions, ckpt_topic: str, ckpts: list[Checkpoint],
                keys: set[PartitionKey], queued: bool, send: Callable[[], Sent],
                timeout_s: float, settle: Callable[[PartitionKey], None]) -> Failed | Commits:
    """One transaction per partition of ``keys``: its checkpoint, then ``send()`` (the
    output writer's produce, with the ownership checks; nothing waited for), then in a thread
    per partition: its output waited for (at most ``timeout_s``) and checked
    (router.output_writer.Sent.check: a partition whose output failed or did not land right
    after the end this worker knew is aborted), its commit, and ``settle(key)`` once it
    committed (the partition's dedup store flush). The delivery wait, the commit round trip
    and the flush's CPU of one partition overlap the others', and the data path's next
    consume. The commits are returned in flight (:class:`Commits`); a batch aborted before
    them returns its :class:`Failed` at once."""
    sent: Sent | None = None
    try:
        txn.begin(keys)
        if queued:
            raise_at("txn-before-send")
        for ck in ckpts:
            produce_checkpoint(txn.producers[(ck.route, ck.partition)], ckpt_topic, ck)
        if queued and fire("after-checkpoint"):
            txn.flush(keys)
            os._exit(137)
        if queued:
            sent = send()
            pause_at("pause-before-commit", lambda: txn.flush(keys))
    except (KafkaException, OutputWriteFailed, FailpointHit) as exc:
        log.warning("batch aborted before its commit (%s)", exc)
        fenced = txn.abort(keys)
        return Failed(keys - fenced, fenced)
    order = sorted(keys)
    written = {} if sent is None else \
        {(o.route.settings.name, o.partition): o for o in sent.writing}

    def commit_then_settle(key: PartitionKey, producer: Producer) -> RouterError | None:
        error = None if sent is None else txn.try_deliver(key, producer, sent, written.get(key),
                                                           timeout_s)
        if error is None:
            error = txn.try_commit(key, producer)
        if error is None:
            settle(key)
            if key in written and fire("exit-after-commit"):
                os._exit(137)
        return error

    return Commits(order, [txn.pool.submit(commit_then_settle, key, txn.producers[key])
                           for key in order],
                   list(written.values()))


@dataclass
class Commits:
    """A batch's commits, issued (each in a thread of its own, followed there by the
    partition's store flush) and not waited for yet (router.batch_end.BatchEnd.settle). Why not
    wait at once: a commit is a round trip to the transaction coordinator (~10 ms a batch here), in
    which the worker can already consume the next batch (router.batch_end)."""

    order: list[PartitionKey]
    futures: list[Future[RouterError | None]]
    written: list[Owned]   # partitions whose output partition the batch wrote


def commit_timeout_s() -> float:
    """The first commit's timeout; the ``txn-commit-timeout`` seam makes it expire at once."""
    return 0.0 if fire("txn-commit-timeout") else 30.0
