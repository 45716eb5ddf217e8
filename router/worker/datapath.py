"""The router's data path: a batched confluent-kafka consume -> decide -> produce loop.

Why not Faust agents: a per-event Faust agent passes two orders of magnitude fewer records
than a batched confluent-kafka loop, and the router must keep up with the loop (docs/decisions/
001-batched-data-path.md); so the loop is plain confluent-kafka, owned by a Faust service
(router.worker.app).

Per batch, in this order (the durability argument of DESIGN.md rests on it):

1. consume up to ``batch_records`` records (a setting: 80,000 by default; why so many: the
   module docstring of router.durability.batch_end); rebalance callbacks run only here, between
   batches, so a revoked partition never has undelivered output (the callbacks:
   router.worker.assignment; taking a partition over: router.durability.takeover);
2. decide every record with its partition's :class:`PartitionRouter`; apply new plans to every
   owned partition; queue the output (router.durability.output_writer);
3. (steps 3 to 5: router.durability.batch_end) write each changed partition's :class:`Checkpoint`
   (resume offsets that never pass a held or undecided record, nor one whose output is
   queued in this batch: router.durability.resume; the decision state; where to read the output
   back from) and wait for it. A crash after this point and before delivery replays the
   batch's records from the checkpoint: the read-back finds what was delivered (not
   forwarded again) and the rest is forwarded then;
4. check that the partitions are still owned (router.durability.ownership), look for another
   writer's records in the output, produce outputs / dead letters / shadows, wait for delivery;
5. flush the dedup stores (identities of delivered records + checkpoint seq), commit the resume
   offsets to the group (for lag tooling; resuming uses the checkpoint).

With transactions (router.durability.transactions) steps 3 and 4 are one transaction per partition,
committed after delivery: an aborted partition is taken over again from its checkpoint and
replayed, and a fenced worker (a newer owner exists) gives up its partitions and rejoins.
There the order inside a transaction does not matter, so step 2 already produces each
partition's forwards into its transaction as they are decided (router.durability.inline_output),
after the ownership and foreign-write checks of step 4 for that partition; step 4's wait for
delivery and its check of where the output landed (a batch that did not land right after the
known end is aborted), the commit and step 5's store flush run in each partition's commit
thread; and they complete while the next batch is consumed (step 1), before any of its
records is decided (router.durability.batch_end).

The per-record loop of step 2 runs compiled where it can (router.native.compiled); the interpreted
loop here (:meth:`DataPath._handle_all`) is the definition it is tested against.

Start-up topic checks: router.worker.topics. The rules, module by module: docs/design.md,
"Durability: the output log is the record of truth".
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from cutover.headers import HeaderError, RecordKind, data_envelope, parse_headers
from cutover.kafka_types import DataMessage
from cutover.plan import CutoverPlan, PlanBook, plan_key_from_env
from cutover.settings import RouterSettings
from router.base.errors import (
    ConsumerFailed,
    OutputWriteFailed,
    OwnershipLost,
    ProducerFenced,
    RouterConfigError,
    RouterError,
    WorkerStalled,
)
from router.base.kafka_io import (
    COOPERATIVE,
    BrokerUnavailable,
    assignment_strategy,
    client_conf,
    data_consumer_conf,
    fatal_errors_raised,
    wait_for_broker,
)
from router.dedup.memory import StoreMemory
from router.durability.batch_end import NOTHING_STALE, BatchEnd, Stale
from router.durability.checkpoint import checkpoint_topic
from router.durability.inline_output import Forward, InlineStream
from router.durability.output_writer import OutputWriter
from router.durability.ownership import PollClock
from router.durability.partition import Owned, RouteRuntime
from router.durability.resume import Headers, Ref
from router.durability.transactions import (
    Failed,
    PartitionKey,
    WorkerTransactions,
    transactions_on,
)
from router.native import compiled
from router.rule.decision import Decision, Incoming, Outcome
from router.rule.oversize import DEFAULT_LIMIT, size_conf
from router.worker.allocator import FreeMemoryTrim, fastbins_off
from router.worker.assignment import Assignment
from router.worker.control import ControlReader, PlanAccepted, recover_plans
from router.worker.data_consumer import DataConsumer
from router.worker.gc_pause import batch_gc_pause, freeze_start_up
from router.worker.held_reads import read_before, rewind_if_changed
from router.worker.orphans import Nudger
from router.worker.rebuilds import RebuildBudget, RebuildsExhausted
from router.worker.status_publisher import PartitionView, StatusBoard
from router.worker.topics import check_routes, ensure_checkpoint_topic
from router.worker.watchdog import Progress, Watchdog
from router.worker.worker_parts import WorkerParts

if TYPE_CHECKING:
    from router.native._fastpath import Tap

log = logging.getLogger("cutover.router")

POLL_S = 0.05
# How often the consumer lag of the owned partitions is noted for /metrics.
LATENCY_SAMPLES = 16   # records per written batch that feed the added-latency histogram
LAG_EVERY_S = 2.0
# How long a partition whose output end was not answered stays set aside before it is asked
# again.
ENDS_RETRY_S = 0.5
# How long a rebuild waits for the old data consumer to close before it goes on without it.
CLOSE_WAIT_S = 5.0


class DataPath:
    """The router worker's engine: call :meth:`run` in a thread, :meth:`stop` from another."""

    def __init__(self, settings: RouterSettings, worker_id: str | None = None,
                 instance_id: str | None = None) -> None:
        """``instance_id``: this worker's stable identity in the group (static membership):
        restarted with the same id, it gets its partitions back at once instead of after
        the dead member's session expires."""
        self.settings = settings
        self.instance_id = instance_id
        self.worker_id = worker_id or instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stop_event = threading.Event()
        self.ckpt_topic: str = settings.checkpoint_topic or checkpoint_topic(settings.group_id)
        self.book = PlanBook(plan_key_from_env())
        self.routes: dict[str, RouteRuntime] = {}
        self.topic_route: dict[str, RouteRuntime] = {}
        self.owned: dict[tuple[str, int], Owned] = {}
        self.joined = False   # the first assignment is taken over (the worker is ready)
        self.store_memory = StoreMemory(settings.store_memory)
        self._route_sizes: dict[str, int] = {}
        self.board = StatusBoard(self.worker_id, routes=self._route_sizes,
                                 plans=self.book.plans, partitions=self._partition_views,
                                 publish=self._publish_status,
                                 interval_s=settings.status_interval_s)
        self.ready = threading.Event()
        self.clock = PollClock()
        self.progress = Progress(settings.stall_after_s)
        self._rebuilds = RebuildBudget(settings.max_rebuilds)
        # A fatal error the data consumer reported (error_cb), e.g. its static membership
        # fenced after the group coordinator moved: the next step rebuilds it.
        self._consumer_fatal: KafkaError | None = None
        self._took_over = False
        # Partitions set aside in this step, those whose output end is asked again at a time,
        # and the raw partitions paused for them (:meth:`_set_aside`).
        self._aside: set[PartitionKey] = set()
        self._ends_retry: dict[PartitionKey, float] = {}
        # Partitions whose output end went unanswered, until it is answered again: their
        # producer's leaders are refreshed then (:meth:`_check_output_ends`).
        self._leader_suspect: set[PartitionKey] = set()
        # Partitions whose producer's leaders are refreshed before the next batch: after any
        # assignment (a session lost to a broker fault included), a broker error the consumer
        # reported, and a commit set aside (:meth:`_refresh_leaders`). None: every owned one.
        self._refresh_due: set[PartitionKey] | None = set()
        self._paused: set[tuple[str, int]] = set()
        # Consumed records of set-aside partitions, per raw partition, in order.
        self._kept_back: dict[tuple[str, int], list[Message]] = {}
        self._lag_noted = 0.0
        # What the worker runs with (router.worker.worker_parts) and its data consumer
        # (router.worker.data_consumer): built by :meth:`run` once the broker answers (they need
        # its topics), before the first batch; only the loop that run() starts reads them.
        self._parts: WorkerParts
        self._consumer: DataConsumer
        # The data consumer's group metadata as last noted (:meth:`_note_group`).
        self._group: bytes | None = None
        # Why the data consumer took its instance's place, until its first assignment, after
        # which the group is made to rebalance once (router.worker.orphans); None otherwise.
        self._took_place: str | None = None
        self.nudger = Nudger(data_consumer_conf(settings, None), self.ckpt_topic,
                             self.stop_event)
        # The per-record path: compiled where it can (router.native.compiled), else interpreted.
        self._compiled = compiled.enabled()
        self._handle = (compiled.CompiledLoop(self._handle_all, self._run_for).handle
                        if self._compiled else self._handle_all)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        """Connect (retrying with backoff), recover plans, then loop until stopped."""
        conf = client_conf(self.settings)
        try:
            wait_for_broker(conf, self.stop_event)
        except BrokerUnavailable:
            return
        self.routes.update(check_routes(self.settings))
        self._route_sizes.update({name: rt.num_partitions for name, rt in self.routes.items()})
        self.topic_route.update({t: rt for rt in self.routes.values()
                                 for t in rt.settings.inputs})
        ensure_checkpoint_topic(self.settings, self.ckpt_topic)
        self._parts = self._connect(conf)
        for event in self._parts.control.catch_up():
            self.board.control_event(event)
        self._consumer = DataConsumer(*self._join())
        self.ready.set()
        Watchdog(self.progress, self.stop_event).start()
        FreeMemoryTrim(self.stop_event).start()
        allocator = fastbins_off()
        log.info("router worker %s started: routes %s, transactions %s, per-record path %s, "
                 "allocator %s", self.worker_id, sorted(self.routes),
                 "on" if self._parts.txn is not None else "off", compiled.path_name(), allocator)
        freeze_start_up()
        try:
            while not self.stop_event.is_set():
                try:
                    with fatal_errors_raised():  # as confluent-kafka may raise them
                        self.step()
                except (RouterConfigError, RebuildsExhausted):
                    raise
                except (KafkaException, RouterError) as exc:
                    self._rebuild(_reason(exc), keep_partitions=isinstance(
                        exc, ConsumerFailed) and self._parts.txn is not None)
        finally:
            self._shutdown()

    def _connect(self, conf: dict[str, Any]) -> WorkerParts:
        """Build what the worker runs with, once its routes are checked: the producers, the
        plans recovered and their reader, the output writer, the assignment and the batch's
        end (router.worker.worker_parts)."""
        txn = (WorkerTransactions(
            self.settings, {name: rt.max_record_bytes for name, rt in self.routes.items()},
            self.worker_id, compiled.tapped_producer if self._compiled else Producer)
            if transactions_on(self.settings) else None)
        producer = Producer(client_conf(
            self.settings, "producer", **{"linger.ms": 5, "batch.num.messages": 10000,
                                          "queue.buffering.max.messages": 1_000_000,
                                          "enable.idempotence": False, "acks": "all",
                                          **size_conf(min((rt.max_record_bytes
                                                           for rt in self.routes.values()),
                                                          default=DEFAULT_LIMIT))}))
        for plan in recover_plans(conf, self.settings, self.book.key):
            self.book.restore(plan)
        control = ControlReader(conf, self.settings, self.book)
        probe = Consumer(client_conf(self.settings, "probe",
                                     **{"group.id": f"{self.settings.group_id}.probe",
                                        "enable.auto.commit": False}))
        writer = OutputWriter(conf, producer, probe, self.settings.request_timeout_s)
        assignment = Assignment(self.settings, self.routes, self.topic_route, self.book.plans,
                                self.ckpt_topic, txn, self.board, self.owned,
                                self.store_memory, before_change=self._before_change,
                                on_takeover=self._note_takeover,
                                cooperative=assignment_strategy(self.settings) == COOPERATIVE)
        end = BatchEnd(owned=self.owned, routes=self.routes, writer=writer, producer=producer,
                       txn=txn, ckpt_topic=self.ckpt_topic, worker_id=self.worker_id,
                       clock=self.clock, consumer=lambda: self._consumer.client,
                       consumer_failed=lambda: self._consumer_fatal is not None,
                       recover=self._recover, group=lambda: self._group,
                       parked=assignment.parked, stuck_s=self.settings.commit_stuck_s)
        return WorkerParts(producer, writer, txn, control, assignment, end)

    def _join(self) -> tuple[Consumer, Tap | None]:
        """Start a data consumer and join the group (rebalance callbacks: below; those of a
        consumer replaced by a rebuild are ignored); with its tap, where the compiled path
        reads its records through librdkafka's interceptor (router.native.compiled)."""
        conf = data_consumer_conf(self.settings, self.instance_id)
        conf["error_cb"] = self._on_consumer_error
        self.clock.max_poll_s = int(conf.get("max.poll.interval.ms", 300000)) / 1000
        tap = compiled.client_tap(conf, consumer=True) if self._compiled else None
        consumer = Consumer(conf)
        assignment = self._parts.assignment
        # A static member taking its instance's place may find partitions assigned to no
        # member; with cooperative assignment the group is made to rebalance once after its
        # first assignment (router.worker.orphans).
        takes_place = bool(self.instance_id) and assignment.cooperative
        if takes_place:
            self._took_place = "the worker rebuilt it" if self.joined else "the worker started"

        def current(callback: Rebalance) -> Rebalance:
            def guarded(c: Consumer, partitions: list[TopicPartition]) -> None:
                if self._consumer.is_current(c):
                    # the generation this rebalance brings, before any commit is waited for
                    self._note_group()
                    callback(c, partitions)
            return guarded

        def on_lost(c: Consumer, partitions: list[TopicPartition]) -> None:
            if takes_place:   # the client rejoins under the instance id with a new member id
                self._took_place = "its session was lost"
            assignment.on_lost(c, partitions)

        consumer.subscribe(sorted(self.topic_route), on_assign=current(assignment.on_assign),
                           on_revoke=current(assignment.on_revoke), on_lost=current(on_lost))
        return consumer, tap

    def _on_consumer_error(self, err: KafkaError) -> None:
        """The data consumer's error_cb (called inside its consume, on the data thread)."""
        if err.fatal() or err.code() == KafkaError._FATAL:
            self._consumer_fatal = err
        else:
            log.warning("consumer: %s", err.str())
            self._refresh_due = None   # a broker failed or moved: every producer asks

    def _before_change(self, closing: set[PartitionKey] | None) -> None:
        """Before the group gives or takes partitions (the rebalance callbacks): the commits
        of the partitions about to be closed are waited for (``closing``; None: every
        partition's), and set-aside partitions are resumed while still assigned and their
        kept-back records dropped (the new assignment positions every partition at its resume
        offsets, and reads them again)."""
        self._parts.end.wait(closing)
        self._resume_set_aside(set(self._paused))
        self._kept_back.clear()

    def _resume_set_aside(self, tps: set[tuple[str, int]]) -> None:
        """Resume paused raw partitions before anything positions them (a seek, an assign).
        Why first: a partition positioned while paused is fetched, once resumed, from where
        the client last delivered, not from where it was positioned (the records in between
        are skipped, and lost to the output: docs/decisions/007-rebuild-not-restart.md)."""
        if not tps:
            return
        self._paused -= tps
        if self._consumer.live:
            try:
                self._consumer.client.resume([TopicPartition(t, p) for t, p in sorted(tps)])
            except KafkaException as exc:  # not assigned any more: nothing to resume
                log.info("resuming %s: %s", sorted(tps), exc)

    def _check_positions(self, msgs: list[Message]) -> list[Message]:
        """The first record of each partition the data path positioned must come from that
        position (router.durability.positions); a partition that skipped ahead is put there again,
        and its records of this batch are left undecided."""
        consumer, assignment = self._consumer.client, self._parts.assignment
        check = assignment.positions.check(consumer, msgs, assignment.by_tp)
        if check.seek:
            self._resume_set_aside({(tp.topic, tp.partition) for tp in check.seek})
            for tp in check.seek:
                self._kept_back.pop((tp.topic, tp.partition), None)
                consumer.seek(tp)
        return check.kept

    def _holds_every_raw_partition(self) -> bool:
        """The data consumer is assigned every partition of every raw topic (a worker alone in
        its group): no partition can be assigned to no member, and a nudge
        (router.worker.orphans) would only cost the group two rebalances, each of which makes
        the batch whose commit it meets abort (its group generation is gone) and replay."""
        try:
            held = {(tp.topic, tp.partition) for tp in self._consumer.client.assignment()}
        except KafkaException:
            return False
        return all((topic, p) in held for topic, rt in self.topic_route.items()
                   for p in range(rt.num_partitions))

    def _note_takeover(self) -> None:
        """After the group assigned partitions: recovering counts as progress. The first time,
        the worker says it is ready: its consumer has joined the group and got its first
        assignment (an empty one included: a group with more workers than partitions), its
        partitions taken over."""
        self._took_over = True
        self._refresh_due = None   # the group moved: a broker may have, too
        if self._took_place is not None:
            if self._holds_every_raw_partition():
                log.info("group %s: the data consumer took its instance's place (%s) and holds "
                         "every raw partition, so none is assigned to no member: no rebalance "
                         "needed", self.settings.group_id, self._took_place)
            else:
                self.nudger.replaced(self._took_place)
            self._took_place = None
        self.progress.idle()  # recovering, not idle: the stall clock starts again
        if not self.joined:
            self.joined = True
            owned = sorted(self.owned)
            log.info("router worker %s ready: joined group %s and owns %s", self.worker_id,
                     self.settings.group_id,
                     f"partitions {owned}" if owned else
                     "no partition yet (the group has given them to its other workers)")

    # -- rebuilding the clients -------------------------------------------------------------

    def _rebuild(self, why: str, keep_partitions: bool = False) -> None:
        """Rebuild the data consumer and the partitions' producers and rejoin the group, as a
        restarted process would, without the restart: the last batch's commits are waited
        for, every partition is given up (stores closed, producers purged), the old consumer
        is closed (at most ``CLOSE_WAIT_S``; its callbacks no longer reach this worker) and a
        new one joins. Partitions taken back resume from their checkpoints; what the dropped
        batch had decided is read and decided again. Raises :class:`RebuildsExhausted` after
        ``max_rebuilds`` in a row without progress.

        ``keep_partitions`` (the consumer alone failed, with transactions):
        only the consumer is rebuilt. The partitions are parked whole, their producers and
        commits in flight included, as a rebalance parks them (router.worker.assignment), and those
        the group gives back go on without a takeover. A session lost while the group
        coordinator moved ends this way (the client's next heartbeat is refused as a fenced
        static member), and every partition of every worker would otherwise be taken over
        again."""
        assignment = self._parts.assignment
        delay = self._rebuilds.spend(why)
        if keep_partitions:
            log.error("%s; rebuilding the data consumer and rejoining the group (partitions "
                      "kept until the group says whether they stay)", why)
            assignment.park_all()
        else:
            log.error("%s; rebuilding the data consumer and the partitions' producers and "
                      "rejoining the group (partitions resume from their checkpoints)", why)
            self._parts.end.abandon()
            assignment.drop_all(discard=True)
        old = self._consumer.retire()
        self._parts.writer.reset()
        self._consumer_fatal = None
        self._paused, self._aside, self._ends_retry = set(), set(), {}
        assignment.positions.clear()
        self._leader_suspect = set()
        self._kept_back.clear()
        _close_in_background(old)
        if delay and self.stop_event.wait(delay):
            return
        self._consumer.replace(*self._join())
        self.progress.rebuilt()
        self.board.changed = True

    def _shutdown(self) -> None:
        parts = self._parts
        parts.end.wait()  # the last batch's commits (its stores flush in their threads)
        parts.writer.probe.close()
        if self._consumer.live:   # else retired by a rebuild stopped before it rejoined
            try:
                self._consumer.client.close()  # revokes: nothing undelivered is pending here
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing consumer: %s", exc)
        parts.assignment.drop_all()  # parked partitions too (the close's revoke parks them)
        if parts.txn is not None:
            parts.txn.close()
        parts.control.close()
        parts.producer.flush(10)

    # -- status -----------------------------------------------------------------------------

    def _partition_views(self, route: str) -> dict[int, PartitionView]:
        return {p: owned.router for (r, p), owned in self.owned.items() if r == route}

    def _publish_status(self, route: str, value: bytes) -> None:
        producer = self._parts.producer
        try:
            producer.produce(self.settings.status_topic, value, route.encode())
            producer.poll(0)
        except BufferError:
            log.warning("status not published: producer queue full")
        except KafkaException as exc:  # a status larger than the producers take
            log.warning("status not published: %s", exc)

    # -- the loop ---------------------------------------------------------------------------

    def step(self) -> None:
        parts = self._parts
        self.progress.begin_step()
        self._took_over = False
        data = self._consumer
        if data.tap is not None:
            # what librdkafka's interceptor keeps of this consume's records, on this thread,
            # which also decides them (router/native/_plugin.h: both in one thread)
            data.tap.begin()
        msgs = data.client.consume(self.settings.batch_records, POLL_S)
        self.clock.polled()
        self._note_group()
        self._raise_if_consumer_failed()
        progressed = bool(msgs) or self._took_over
        msgs = self._check_positions(msgs)
        with batch_gc_pause():
            stale = parts.end.settle()  # the last batch's commits ran during the consume
            if stale:
                # kept back while their commit was in flight, or consumed since: either way read
                # again from the checkpoints of the partitions taken over again
                kept = [m for tp in stale.partitions for m in self._kept_back.pop(tp, [])]
                self._count_reread(stale.dropped(kept + msgs))
                fresh = stale.fresh(msgs)
                log.warning("%d consumed records dropped: read again from the checkpoints of "
                            "partitions taken over again", len(kept) + len(msgs) - len(fresh))
                msgs = fresh
            msgs = self._set_aside(msgs)
            self._refresh_leaders()
            if msgs and parts.txn is not None:
                msgs = self._check_output_ends(msgs)
            if msgs:
                self._handle(msgs)
            for key, owned in self.owned.items():
                if owned.bound.pending and key not in self._aside:
                    self._apply_pending(owned)
            for event in parts.control.poll():
                self.board.control_event(event)
                if isinstance(event, PlanAccepted):
                    self._apply_everywhere(event.plan)
            if parts.end.complete():
                self.board.changed = True
                self._note_latency(msgs)
            del msgs
        self._raise_if_consumer_failed()   # met among the batch's records
        if time.monotonic() - self._lag_noted >= LAG_EVERY_S:
            self._note_lag()
        self.board.tick()
        self.progress.stepped(progressed)
        if progressed:
            self._rebuilds.progressed()
        elif self.progress.check_due():
            self._judge_stall()

    def _note_group(self) -> None:
        """Note the data consumer's group metadata as it stands (None without a member id: the
        client blanks it when its session is lost, and the group coordinator does not check a
        blank generation). On this thread, after every consume and at the start of every
        rebalance callback: the commit threads read what was noted (router.durability.transactions)
        and never call the consumer, which the client lets one thread use at a time (a commit
        thread asking it while this one waits for that commit in a rebalance callback would
        wait for ever)."""
        if self._parts.txn is None or not self._consumer.live:
            return
        consumer = self._consumer.client
        try:
            self._group = consumer.consumer_group_metadata() if consumer.memberid() else None
        except (KafkaException, RuntimeError):   # closed by a rebuild meanwhile
            self._group = None

    # -- partitions set aside -----------------------------------------------------------------

    def _set_aside(self, msgs: list[Message]) -> list[Message]:
        """Per partition, not per worker: a partition whose last commit is still in flight
        (router.durability.batch_end.BatchEnd.settle), or whose output end its leader did not give
        (:meth:`_check_output_ends`), is set aside while the others go on. It is paused, and
        its records consumed meanwhile are kept back, in order, and decided first once it is
        clear (before anything it is given after its resume); plans reach it then too
        (:meth:`_apply_everywhere`). So a slow, frozen or dead broker holds only the
        partitions whose requests go to it. Kept-back records never move the partition's
        resume offsets; a rebalance, a takeover again or a rebuild drops them, and the
        partition reads them again from its resume offsets."""
        end = self._parts.end
        now = time.monotonic()
        self._ends_retry = {k: at for k, at in self._ends_retry.items()
                            if at > now and k in self.owned}
        end.plan()
        aside = (end.unsettled() | set(self._ends_retry)) & set(self.owned)
        if aside - self._aside:
            log.info("partitions %s set aside (a commit in flight, or the output's end not "
                     "answered); the others go on", sorted(aside - self._aside))
            if self._refresh_due is not None:   # a commit waiting on a leader that moved?
                self._refresh_due |= (aside - self._aside) & end.unsettled()
        self._aside = aside
        self._pause_only(aside)
        by_tp = self._parts.assignment.by_tp
        front: list[Message] = []
        for tp in list(self._kept_back):
            owned = by_tp.get(tp)
            if owned is None:
                del self._kept_back[tp]  # not this worker's any more: read by its next owner
            elif (owned.route.settings.name, owned.partition) not in aside:
                front.extend(self._kept_back.pop(tp))
        if not aside:
            return front + msgs if front else msgs
        keep: list[Message] = []
        for m in msgs:
            if m.error() is None:
                if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call
                    m = cast(DataMessage, m)
                tp = (m.topic(), m.partition())
                owned = by_tp.get(tp)
                if owned is not None and (owned.route.settings.name, owned.partition) in aside:
                    self._kept_back.setdefault(tp, []).append(m)
                    continue
            keep.append(m)
        return front + keep

    def _pause_only(self, keys: set[PartitionKey]) -> None:
        """Pause the raw partitions of ``keys``; resume those paused before and not now."""
        consumer = self._consumer.client
        want = {(t, p) for r, p in keys for t in self.routes[r].settings.inputs}
        pause, resume = want - self._paused, self._paused - want
        if pause:
            consumer.pause([TopicPartition(t, p) for t, p in sorted(pause)])
        if resume:
            consumer.resume([TopicPartition(t, p) for t, p in sorted(resume)])
        self._paused = want

    def _check_output_ends(self, msgs: list[Message]) -> list[Message]:
        """Before a batch's first record is decided (with transactions, where forwards are
        produced as decided): ownership, and the end of every owned output partition not set
        aside, in one request (another writer's records there are taken in first:
        router.durability.output_writer). A partition whose end is not answered is set aside for
        ``ENDS_RETRY_S``, and asked again then, of its new leader if Kafka has elected one."""
        parts = self._parts
        try:
            parts.end.check_ownership()
        except OwnershipLost as exc:
            # Nothing of the batch is decided yet: the consumer alone is rebuilt, the
            # partitions kept (:meth:`_rebuild`). A fatal consumer error takes the assignment
            # away before the client reports it.
            raise ConsumerFailed(str(exc)) from None
        owned = [o for k, o in self.owned.items() if k not in self._aside]
        unanswered = parts.writer.fence_foreign_writes(owned, every=True)
        back = {(o.route.settings.name, o.partition) for o in owned} & self._leader_suspect
        back -= unanswered
        if back and parts.txn is not None:
            # Answered again, by the new leader once Kafka moved it: the partition's producer
            # learns it now. Its own metadata would otherwise send the next batch to the old
            # leader, and learn of the move only when that request times out.
            parts.txn.refresh_leaders(back, self.settings.request_timeout_s)
        self._leader_suspect = (self._leader_suspect - back) | unanswered
        if not unanswered:
            return msgs
        log.warning("partitions %s: the output's end was not answered within %.1fs; set aside "
                    "and asked again in %.1fs, the other partitions go on",
                    sorted(unanswered), self.settings.request_timeout_s, ENDS_RETRY_S)
        retry_at = time.monotonic() + ENDS_RETRY_S
        self._ends_retry.update(dict.fromkeys(unanswered, retry_at))
        return self._set_aside(msgs)

    def _refresh_leaders(self) -> None:
        """Have the producers of the partitions due (``_refresh_due``) ask for their leaders,
        in the background (router.durability.transactions.WorkerTransactions.refresh_leaders). Why
        these moments: a producer keeps the leaders it knows until a request to one times out.
        Kafka moves a frozen or dead broker's partitions within its session timeout, and a
        worker's next batches, produced to the old leader, would each wait out the socket
        timeout; the signs that a broker failed reach the worker as a rebalance (its session
        lost while the group coordinator moved), a consumer error, or a commit that does not
        settle."""
        due, self._refresh_due = self._refresh_due, set()
        txn = self._parts.txn
        if txn is None or due == set():
            return
        txn.refresh_leaders(set(self.owned) if due is None else due & set(self.owned),
                                  self.settings.request_timeout_s)

    def _positions(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per owned raw partition (topic, partition): where the worker stands (its consumer
        position, or its resume offset before it consumed anything) and the high watermark its
        last fetch saw (-1: no fetch answered yet). Local to the client: no request."""
        consumer, by_tp = self._consumer.client, self._parts.assignment.by_tp
        tps = [TopicPartition(t, p) for t, p in by_tp]
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for tp in consumer.position(tps) if tps else []:
            owned = by_tp[(tp.topic, tp.partition)]
            at = tp.offset if tp.offset >= 0 else \
                owned.durability.next_offsets.get(tp.topic, 0)
            got = consumer.get_watermark_offsets(tp, cached=True)
            out[(tp.topic, tp.partition)] = (at, got[1] if got is not None else -1)
        return out

    def _note_latency(self, msgs: list[Message]) -> None:
        """Feed the added-latency histogram (raw record timestamp to output write) from a
        sample of the batch just written: up to LATENCY_SAMPLES records spread over it, so the
        per-record path pays nothing (the histogram counts samples, not records)."""
        if not msgs:
            return
        now_ms = time.time() * 1000
        for msg in msgs[::max(1, len(msgs) // LATENCY_SAMPLES)][:LATENCY_SAMPLES]:
            rt = self.topic_route.get(msg.topic() or "")
            written = msg.timestamp()[1]
            if rt is not None and written > 0:
                self.board.latency(rt.settings.name, max(0.0, now_ms - written) / 1000)

    def _note_lag(self) -> None:
        """The consumer lag of each owned raw partition, for /metrics."""
        self._lag_noted = time.monotonic()
        by_tp = self._parts.assignment.by_tp
        for (topic, p), (at, high) in self._positions().items():
            if high >= 0:
                owned = by_tp[(topic, p)]
                self.board.lag(owned.route.settings.name, p, high - at)

    def _judge_stall(self) -> None:
        """No progress for ``stall_after_s``: a stall if input waits on a partition this
        worker owns (its position below the high watermark its last fetch saw; a partition
        whose fetches never answered counts as waiting), else the worker is merely idle."""
        waiting = [f"{topic}:{p}" for (topic, p), (at, high) in self._positions().items()
                   if high < 0 or at < high]
        if not waiting:
            self.progress.idle()
            return
        reason = (f"no record decided for {self.settings.stall_after_s:.0f}s while input "
                  f"waits on {', '.join(waiting[:8])}{' ...' if len(waiting) > 8 else ''}")
        self.progress.stall(reason)
        raise WorkerStalled(reason)

    def _handle_all(self, msgs: list[Message]) -> None:
        """Decide a consumed batch. The per-record path is written for speed (locals, nothing
        built for a suppressed record, a forward queued inline): it is most of the router's
        CPU time. Anything else (heartbeats, headers not in the tagger's data layout, shadow
        copies, dead letters, duplicates, releases) takes the general path, :meth:`_observe`."""
        by_tp = self._parts.assignment.by_tp
        forward = Outcome.FORWARD
        send: Forward = self._parts.writer.forward
        # A consumed batch comes in long runs of one partition's records (a fetch response per
        # partition), so the partition's state is looked up when the run changes, not per
        # record: the lookup hashed a new topic string and tuple each time.
        last_topic, last_p = "", -1
        owned: Owned | None = None
        for msg in msgs:
            if msg.error() is not None:
                self._consumer_error(msg)
                continue
            if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call per record
                msg = cast(DataMessage, msg)
            topic, p = msg.topic(), msg.partition()
            if p != last_p or topic != last_topic:
                last_topic, last_p = topic, p
                owned = by_tp.get((topic, p))
                if owned is not None:
                    dur, bound, router = owned.durability, owned.bound, owned.router
                    offsets, general = dur.next_offsets, owned.route.settings.shadow is not None
                    send = self._sender(owned, general)
            if owned is None:
                continue
            off = msg.offset()
            if bound.topics and read_before(owned, msg, topic, off, self._apply_pending):
                continue
            offsets[topic] = off + 1
            dur.dirty = True
            headers = msg.headers()
            fast = data_envelope(headers)
            if fast is None or general:
                self._observe(owned, msg, topic, off, headers)
                continue
            version, t = fast
            written = msg.timestamp()[1]
            if router.suppresses(version, t, written):
                continue
            key, value = msg.key(), msg.value()   # each call builds a new bytes object
            d = router.decide(Incoming(version, t, None, key, value, False, None, None,
                                       written))
            if d.outcome is forward and not dur.skip:
                send(owned, topic, off, headers, key, value)
            else:
                # The Ref only now: a forward (half of all raw records) needs none, and a held
                # record is the same object the rule keeps
                d.record.ref = Ref(topic, off, headers, dur.out_pos)
                self._act(owned, [d])

    def _run_for(self, tp: tuple[str, int]) -> compiled.Run | None:
        """The compiled run of raw partition ``tp`` in this batch (router.native.compiled); None
        where the interpreted path decides it (a partition not owned, a route with a shadow
        topic)."""
        owned = self._parts.assignment.by_tp.get(tp)
        if owned is None or owned.route.settings.shadow is not None:
            return None
        return compiled.make_run(owned, tp[0], self._stream(owned, False),
                                 self._parts.writer.queue, self._consumer.tap)

    def _sender(self, owned: Owned, general: bool) -> Forward:
        """How a run of ``owned``'s records sends its forwards: with transactions, produced
        as decided (router.durability.inline_output), else queued for the batch's end."""
        stream = self._stream(owned, general)
        return stream.send if stream is not None and stream.live else self._parts.writer.forward

    def _stream(self, owned: Owned, general: bool) -> InlineStream | None:
        """``owned``'s output stream of this batch (transactions, and not ``general``), or
        None. Called before the partition's first record of the batch is decided, so that
        nothing of the partition is queued yet when its stream opens. The first stream of a
        batch checks ownership and the end of every owned output partition (the checks before
        producing a queued batch), in one request."""
        writer, txn = self._parts.writer, self._parts.txn
        if txn is None or general:
            return None
        key = (owned.route.settings.name, owned.partition)
        stream = writer.streams.get((owned.route.settings.output, owned.partition))
        if stream is None:
            try:
                if not writer.checked_every:  # checked before the batch's first record
                    raise OutputWriteFailed("the output's end was not checked in this batch")
                txn.begin([key])
                stream = writer.open_stream(owned, txn.producer_of_key(key))
            except (KafkaException, RouterError) as exc:
                log.warning("partition %s/%d: output queued for the batch's end (%s)",
                            key[0], key[1], exc)  # which meets the problem and aborts
                stream = writer.open_stream(owned, txn.producer_of_key(key))
                stream.stop()
        return stream

    def _observe(self, owned: Owned, msg: Message, topic: str, off: int,
                 headers: Headers | None) -> None:
        ref = Ref(topic, off, headers, owned.durability.out_pos)
        try:
            tag = parse_headers(headers)
        except HeaderError as exc:
            inc = Incoming("?", None, key=msg.key(), value=msg.value(), error=str(exc),
                           ref=ref)
        else:
            inc = Incoming(tag.version, tag.event_time, tag.watermark, msg.key(), msg.value(),
                           tag.kind is RecordKind.HEARTBEAT, None, ref, msg.timestamp()[1])
        self._act(owned, owned.router.observe(inc))
        if owned.bound.topics:
            rewind_if_changed(self._consumer.client, owned)

    def _count_reread(self, dropped: dict[tuple[str, int], int]) -> None:
        """Count the dropped records on the partitions they will be read again by (the status'
        ``reread``); a partition not owned any more (the worker rejoined) counts nowhere: its
        next owner reads them."""
        by_tp = self._parts.assignment.by_tp
        for tp, n in dropped.items():
            owned = by_tp.get(tp)
            if owned is not None:
                owned.router.counters.reread += n

    def _raise_if_consumer_failed(self) -> None:
        """Raise :class:`ConsumerFailed` for a fatal consumer error reported since the last
        check (by the error callback or among a batch's records), between batches."""
        if self._consumer_fatal is not None:
            err, self._consumer_fatal = self._consumer_fatal, None
            raise ConsumerFailed(f"the data consumer failed ({err.str()})")

    def _consumer_error(self, msg: Message) -> None:
        """An error the consumer returned among a batch's records. A fatal one is raised
        once the batch ended (:meth:`step`), not in the middle of it: the records consumed
        before it are valid and the batch ends as any other, so a rebuild of the consumer
        alone can keep the partitions (:meth:`_rebuild`)."""
        err = msg.error()
        assert err is not None, "not an error record"
        if err.fatal() or err.code() == KafkaError._FATAL:
            if self._consumer_fatal is None:
                self._consumer_fatal = err
            return
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer: %s", err.str())

    def _apply_everywhere(self, plan: CutoverPlan) -> None:
        """Apply a plan to every partition of its route this worker has: at once, or once
        the partition is clear (set aside, rewinding, or parked by a rebalance or a rebuild
        of the consumer: a parked partition the group gives back decides with every plan
        accepted meanwhile, as a partition taken over reads them from the plan book)."""
        for owned in self._parts.assignment.parked.values():
            if owned.route.settings.name == plan.route:
                owned.bound.pending.append(plan)
        for key, owned in self.owned.items():
            if owned.route.settings.name != plan.route:
                continue
            if key in self._aside:
                owned.bound.pending.append(plan)  # applied once the partition is clear
            elif owned.bound.topics and owned.bound.rewinding(owned.durability.next_offsets):
                owned.bound.pending.append(plan)  # applied once read again (router.rule.held_bound)
            else:
                self._apply(owned, plan)
        self.board.changed = True

    def _apply(self, owned: Owned, plan: CutoverPlan) -> bool:
        """Apply a plan to one partition; True if that rewound one of its topics."""
        self._act(owned, owned.router.apply_plan(plan))
        owned.durability.dirty = True
        return bool(owned.bound.topics) and rewind_if_changed(self._consumer.client, owned)

    def _apply_pending(self, owned: Owned) -> bool:
        """Plans that waited for a rewind, once it is read; True if one rewound again."""
        bound = owned.bound
        while bound.pending and not bound.rewinding(owned.durability.next_offsets):
            if self._apply(owned, bound.pending.pop(0)):
                return True
        return False

    def _act(self, owned: Owned, decisions: list[Decision]) -> None:
        """Queue the output of decisions made on the general path."""
        writer = self._parts.writer
        shadow = owned.route.settings.shadow is not None
        skip = owned.durability.skip
        for d in decisions:
            outcome = d.outcome
            if outcome is Outcome.HOLD or outcome is Outcome.DUPLICATE:
                continue
            rec = d.record
            ref: Ref = rec.ref
            if outcome is Outcome.OVER_BOUND:
                owned.bound.drop(ref.topic, ref.offset, ref.out_pos, owned.router.hold_rule(),
                                 owned.router.rule_changes)
            elif outcome is Outcome.FORWARD:
                if (ref.topic, ref.offset) not in skip:  # else in the output log already
                    writer.forward(owned, ref.topic, ref.offset, ref.headers, rec.key,
                                   rec.value)
            elif outcome is Outcome.DEAD_LETTER:
                writer.dead_letter(owned, ref, rec.key, rec.value, d.reason)
                self.board.dead_lettered(owned.route.settings.name, d.reason or "")
            elif shadow:  # Outcome.SUPPRESS with a shadow topic
                writer.shadow(owned, ref, rec.key, rec.value)

    # -- after a failed batch -------------------------------------------------------------

    def _recover(self, failed: Failed) -> Stale:
        """After a failed batch: a fenced producer means a newer owner has the partition, so
        give up every partition and rejoin the group (the group says who owns what); aborted
        partitions are taken over again from their checkpoints and replayed. Returns the
        records consumed since that are read again (router.durability.batch_end.Stale)."""
        if failed.fenced:
            raise ProducerFenced(f"partitions {sorted(failed.fenced)} have a newer owner "
                                 "(producer fenced)")
        if not failed.aborted:
            return NOTHING_STALE
        self._resume_set_aside({(t, p) for route, p in failed.aborted
                                for t in self.routes[route].settings.inputs})
        self._parts.assignment.retake(self._consumer.client, set(failed.aborted))
        log.warning("partitions %s: batch aborted; replaying from their checkpoints",
                    sorted(failed.aborted))
        return Stale(frozenset((t, p) for route, p in failed.aborted
                               for t in self.routes[route].settings.inputs))


Rebalance = Callable[[Consumer, list[TopicPartition]], None]


def _reason(exc: BaseException) -> str:
    """One line for the log: the error's own sentence."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return f"client error: {exc.args[0].str()}"
    return str(exc) or type(exc).__name__


def _close_in_background(consumer: Consumer) -> None:
    """Close a data consumer being replaced, waiting at most ``CLOSE_WAIT_S``: a consumer
    whose coordinator is gone can take its whole session to close, and the new one does not
    need it closed (with an instance id it takes the member's place, without one the old
    member's session ends)."""
    def close() -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("closing the replaced consumer: %s", exc)

    closer = threading.Thread(target=close, name="cutover-consumer-close", daemon=True)
    closer.start()
    closer.join(CLOSE_WAIT_S)
