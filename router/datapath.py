"""The router's data path: a batched confluent-kafka consume -> decide -> produce loop.

Why not Faust agents: measured on this machine a per-event Faust agent passes ~2,000 records/s
while a batched confluent loop passes ~200,000; the contract asks for >= 50% of the latter, so
the loop is plain confluent-kafka, owned by a Faust service (router.app).

Per batch, in this order (the durability argument of DESIGN.md rests on it):

1. consume up to ``BATCH`` records; rebalance callbacks run only here, between batches, so a
   revoked partition never has undelivered output;
2. decide every record with its partition's :class:`PartitionRouter`; apply new plans to every
   owned partition;
3. write each changed partition's :class:`Checkpoint` (resume offsets that never pass a held or
   undecided record, nor one whose output is queued in this batch; the decision state; where
   to read the output back from) and wait for it. A crash after this point and before
   delivery replays the batch's records from the checkpoint: the read-back finds what was
   delivered (not forwarded again) and the rest is forwarded then;
4. check that the partitions are still owned, produce outputs / dead letters / shadows, wait for
   delivery;
5. flush the dedup stores (identities of delivered records + checkpoint seq), commit the resume
   offsets to the group (for lag tooling; resuming uses the checkpoint).

A worker taking over partition ``p`` restores the newest checkpoint, reads output ``p`` back from
the checkpoint's ``readback_from`` (from ``rebuild_from`` when its local store is missing or
stale) and does not forward again the raw offsets it finds there.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cutover.headers import ERROR, SRC, HeaderError, RecordKind, data_envelope, parse_headers
from cutover.plan import CutoverPlan, PlanBook, plan_key_from_env
from cutover.settings import Handover, RouterSettings, RouteSettings
from router.checkpoint import Checkpoint, checkpoint_topic, read_checkpoints, write_checkpoints
from router.control import ControlReader, recover_plans
from router.decision import Decision, Incoming, Outcome, PartitionRouter
from router.dedup_store import DedupStore
from router.gc_pause import batch_gc_pause
from router.identity import IdentityFn, identity_function
from router.kafka_io import (
    BrokerUnavailable,
    client_conf,
    partitions_of,
    read_to_end,
    wait_for_broker,
)
from router.recovery import ReadBack, note, read_back_outputs
from router.status_publisher import StatusBoard

log = logging.getLogger("cutover.router")

BATCH = 20_000
POLL_S = 0.05
# Test-only crash point: "after-checkpoint" exits right after a batch's checkpoint is durable
# and before its output is produced (the window the resume-offset rule above exists for).
FAILPOINT = os.environ.get("CUTOVER_FAILPOINT", "")


class RouterConfigError(RuntimeError):
    """The topics do not fit the settings (missing output, partition counts differ)."""


@dataclass(slots=True)
class Ref:
    """What the loop keeps of a raw record while it is undecided."""

    topic: str
    offset: int
    headers: list[tuple[str, bytes]] | None
    out_pos: int   # output position when the record was read (read-back lower bound)


@dataclass
class RouteRuntime:
    settings: RouteSettings
    identity: IdentityFn
    num_partitions: int
    topic_partitions: int = 0


@dataclass
class Owned:
    """One raw partition of one route owned by this worker."""

    route: RouteRuntime
    partition: int
    router: PartitionRouter
    store: DedupStore
    seq: int
    next_offsets: dict[str, int]
    skip: set[tuple[str, int]]
    out_pos: int
    rebuild_from: int
    rebuild_marks: collections.deque[tuple[int, int]] = field(default_factory=collections.deque)
    dirty: bool = True
    queued: int = 0    # output records of this partition queued in the current batch
    owner_gen: int = 0  # ownership generation of the checkpoints this worker writes
    known_end: int = 0  # output partition end as this worker knows it (read back + delivered)
    delivered_to: int = 0  # one past the highest output offset delivered in this batch
    # Records another writer put in the output whose raw offset this worker has not passed:
    # (raw topic, raw offset, output offset); they keep readback_from at or below them.
    ahead: list[tuple[str, int, int]] = field(default_factory=list)
    # Lowest raw offset per input topic whose output (forward, dead letter, shadow) is queued
    # in the current batch: the batch's checkpoint, durable before that output is delivered,
    # must not resume past it, or a crash in between would lose the record.
    undelivered: dict[str, int] = field(default_factory=dict)


def _mark_undelivered(owned: Owned, topic: str, off: int) -> None:
    """Output of raw record (topic, off) is queued: the batch's checkpoint resumes at or
    before it."""
    low = owned.undelivered.get(topic)
    if low is None or off < low:
        owned.undelivered[topic] = off


class DataPath:
    """The router worker's engine: call :meth:`run` in a thread, :meth:`stop` from another."""

    def __init__(self, settings: RouterSettings, worker_id: str | None = None,
                 on_status: Callable[[StatusBoard], None] | None = None) -> None:
        self.settings = settings
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stop_event = threading.Event()
        self.ckpt_topic: str = settings.checkpoint_topic or checkpoint_topic(settings.group_id)
        self.book = PlanBook(plan_key_from_env())
        self.routes: dict[str, RouteRuntime] = {}
        self.topic_route: dict[str, RouteRuntime] = {}
        self.owned: dict[tuple[str, int], Owned] = {}
        self.board = StatusBoard(self)
        self.on_status = on_status
        self.ready = threading.Event()
        self._outputs: list[tuple[str, int, bytes | None, bytes | None, list[Any]]] = []
        self._out_owner: list[tuple[str, int]] = []
        self._last_poll = time.monotonic()
        self._last_purge = time.monotonic()
        self._consumer: Consumer | None = None
        self._probe: Consumer | None = None
        self._producer: Producer | None = None
        self._control: ControlReader | None = None
        self._max_poll_s = 300.0
        self._by_tp: dict[tuple[str, int], Owned] = {}

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
        self._check_topics()
        self._producer = Producer(client_conf(
            self.settings, "producer", **{"linger.ms": 5, "batch.num.messages": 10000,
                                          "queue.buffering.max.messages": 1_000_000,
                                          "enable.idempotence": False, "acks": "all"}))
        for plan in recover_plans(conf, self.settings, self.book.key):
            self.book.restore(plan)
        self._control = ControlReader(conf, self.settings, self.book)
        for kind, payload in self._control.catch_up():
            self.board.control_event(kind, payload)
        self._consumer = self._make_consumer()
        # Output ends are asked on a client of their own: on the data consumer the request
        # queues behind its long-poll fetch (measured: ~1 s per batch with the default wait).
        self._probe = Consumer(client_conf(self.settings, "probe",
                                           **{"group.id": f"{self.settings.group_id}.probe",
                                              "enable.auto.commit": False}))
        self._consumer.subscribe(sorted(self.topic_route), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)
        self.ready.set()
        log.info("router worker %s started: routes %s", self.worker_id, sorted(self.routes))
        try:
            while not self.stop_event.is_set():
                self.step()
        finally:
            self._shutdown()

    def _make_consumer(self) -> Consumer:
        extra: dict[str, Any] = {
            "group.id": self.settings.group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
            "enable.partition.eof": False, "queued.max.messages.kbytes": 262144,
        }
        conf = client_conf(self.settings, **extra)
        for k, v in extra.items():  # the operator's settings win where given
            conf[k] = self.settings.kafka.get(k, v)
        conf["partition.assignment.strategy"] = "range"  # co-partitioned inputs need it
        conf["enable.auto.commit"] = False
        self._max_poll_s = int(conf.get("max.poll.interval.ms", 300000)) / 1000
        return Consumer(conf)

    def _shutdown(self) -> None:
        if self._probe is not None:
            self._probe.close()
        if self._consumer is not None:
            try:
                self._consumer.close()  # revokes: nothing undelivered is pending here
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing consumer: %s", exc)
        for owned in self.owned.values():
            owned.store.close()
        self.owned.clear()
        if self._control is not None:
            self._control.close()
        if self._producer is not None:
            self._producer.flush(10)

    def _check_topics(self) -> None:
        conf = client_conf(self.settings)
        for r in self.settings.routes:
            counts = {t: partitions_of(conf, t) for t in r.inputs}
            missing = [t for t, n in counts.items() if n is None]
            if missing:
                raise RouterConfigError(f"route {r.name}: input topic {missing[0]!r} does not "
                                        "exist; create it (or fix routes[].inputs)")
            if len(set(counts.values())) != 1:
                raise RouterConfigError(
                    f"route {r.name}: input topics have different partition counts {counts}; "
                    "a route's inputs must be co-partitioned")
            n = next(iter(counts.values()))
            for kind, t in (("output", r.output), ("dead_letter", r.dead_letter),
                            ("shadow", r.shadow)):
                if t is None:
                    continue
                have = partitions_of(conf, t)
                if have is None:
                    raise RouterConfigError(
                        f"route {r.name}: {kind} topic {t!r} does not exist; create it with "
                        f"{n} partitions (the router keeps each record's partition number)")
                if have < n:
                    raise RouterConfigError(
                        f"route {r.name}: {kind} topic {t!r} has {have} partitions, the inputs "
                        f"have {n}; give it at least {n}")
            rt = RouteRuntime(r, identity_function(r.dedup.identity), n)
            self.routes[r.name] = rt
            for t in r.inputs:
                self.topic_route[t] = rt
        admin = AdminClient(client_conf(self.settings, "admin"))
        if self.ckpt_topic not in admin.list_topics(timeout=10).topics:
            # Replication factor left to the broker's default (create it yourself for more).
            fut = admin.create_topics([NewTopic(self.ckpt_topic, 1,
                                                config={"cleanup.policy": "compact"})])
            try:
                fut[self.ckpt_topic].result(15)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise RouterConfigError(f"cannot create checkpoint topic "
                                            f"{self.ckpt_topic!r}: {exc}") from None

    # -- rebalance --------------------------------------------------------------------------

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drop({(self.topic_route[tp.topic].settings.name, tp.partition)
                    for tp in partitions if tp.topic in self.topic_route})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("partitions lost (session expired): %s",
                    [f"{tp.topic}:{tp.partition}" for tp in partitions])
        self._on_revoke(consumer, partitions)

    def _drop(self, keys: set[tuple[str, int]]) -> None:
        for key in keys:
            owned = self.owned.pop(key, None)
            if owned is not None:
                owned.store.close()
        self._index()
        if keys:
            self.board.changed = True
            log.info("released partitions %s", sorted(keys))

    def _index(self) -> None:
        """(raw topic, partition) -> owned partition, for the per-record path."""
        self._by_tp = {(t, p): o for (_, p), o in self.owned.items()
                       for t in o.route.settings.inputs}

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        keys = sorted({(self.topic_route[tp.topic].settings.name, tp.partition)
                       for tp in partitions if tp.topic in self.topic_route})
        conf = client_conf(self.settings)
        ckpts = read_checkpoints(conf, self.ckpt_topic, set(keys))
        self.owned.update(self._recover({k: ckpts.get(k) for k in keys if k not in self.owned}))
        assign = []
        for tp in partitions:
            rt = self.topic_route.get(tp.topic)
            if rt is None:
                continue
            owned = self.owned[(rt.settings.name, tp.partition)]
            assign.append(TopicPartition(tp.topic, tp.partition,
                                         owned.next_offsets.get(tp.topic, 0)))
        consumer.assign(assign)
        self._index()
        self.board.changed = True
        log.info("took over partitions %s", keys)

    def _store_path(self, route: str, partition: int) -> Path:
        return Path(self.settings.state_dir) / route / str(partition)

    def _recover(self, cks: dict[tuple[str, int], Checkpoint | None]
                 ) -> dict[tuple[str, int], Owned]:
        """Take over partitions: restore each one's newest checkpoint, then read its output
        partition back (one read per output topic for all partitions taken over)."""
        conf = client_conf(self.settings)
        preps: dict[tuple[str, int], tuple[PartitionRouter, DedupStore, int, dict[str, int],
                                           int, int, bool, int]] = {}
        for (route, p), ck in cks.items():
            rt = self.routes[route]
            rs = rt.settings
            router = PartitionRouter(p, identity=rt.identity, store=None,  # type: ignore[arg-type]
                                     retention_ms=rs.dedup.retention_ms,
                                     ordered=rs.handover is Handover.ORDERED,
                                     max_held=rs.max_held,
                                     future_tolerance_ms=rs.future_tolerance_ms)
            path = self._store_path(route, p)
            store = DedupStore(path, rs.dedup)
            store_seq = int(store.get_meta("seq") or b"0")
            if ck is not None:
                router.restore(ck.snapshot)
                offsets = dict(ck.offsets)
                seq, rebuild_from, start = ck.seq, ck.rebuild_from, ck.readback_from
                fresh = store_seq not in (ck.seq, ck.seq - 1)
                gen = ck.owner_gen + 1
            else:
                offsets, seq, rebuild_from, start, fresh = {}, 0, 0, 0, store_seq != 0
                gen = 1
            for t in rs.inputs:
                offsets.setdefault(t, self._low_offset(t, p))
            if fresh:
                store.destroy()
                shutil.rmtree(path, ignore_errors=True)
                store = DedupStore(path, rs.dedup)
                start = min(start, rebuild_from)
            router.store = store
            preps[(route, p)] = (router, store, seq, offsets, rebuild_from, start, fresh, gen)
        rbs: dict[tuple[str, int], ReadBack] = {}
        for route in {r for r, _ in preps}:
            rt = self.routes[route]
            wanted = {p: (pr[5], pr[3], pr[1]) for (r, p), pr in preps.items() if r == route}
            for p, rb in read_back_outputs(conf, rt.settings.output, wanted,
                                           rt.identity).items():
                rbs[(route, p)] = rb
        out: dict[tuple[str, int], Owned] = {}
        for key, (router, store, seq, offsets, rebuild_from, start, fresh, gen) in preps.items():
            route, p = key
            rt = self.routes[route]
            rb = rbs[key]
            plan = self.book.plans.get(route)
            if plan is not None:
                self._act(rt, router.apply_plan(plan))  # nothing is held yet: nothing released
            log.info("partition %s/%d: resume at %s, checkpoint seq %d, %s store, read back %d "
                     "output records from %d (%d already forwarded past the resume point)",
                     route, p, offsets, seq, "rebuilt" if fresh else "kept", rb.records, start,
                     len(rb.forwarded))
            owned = Owned(rt, p, router, store, seq, offsets, rb.forwarded, rb.end, rebuild_from,
                          owner_gen=gen, known_end=rb.end)
            owned.rebuild_marks.append((router.horizon or 0, rebuild_from))
            out[key] = owned
        return out

    def _low_offset(self, topic: str, partition: int) -> int:
        assert self._consumer is not None
        try:
            low, _ = self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                          timeout=10)
            return max(int(low), 0)
        except KafkaException:
            return 0

    # -- the loop ---------------------------------------------------------------------------

    def step(self) -> None:
        assert self._consumer is not None and self._control is not None
        msgs = self._consumer.consume(BATCH, POLL_S)
        self._last_poll = time.monotonic()
        with batch_gc_pause():
            if msgs:
                self._handle_all(msgs)
            for kind, payload in self._control.poll():
                self.board.control_event(kind, payload)
                if kind == "accepted":
                    self._apply_everywhere(payload)
            self._complete_batch()
            del msgs
        self.board.tick()

    def _handle_all(self, msgs: list[Message]) -> None:
        """Decide a consumed batch. The per-record path is written for speed (locals, nothing
        built for a suppressed record, a forward queued inline): it is most of the router's
        CPU time. Anything else (heartbeats, headers not in the tagger's data layout, shadow
        copies, dead letters, duplicates, releases) takes the general path, :meth:`_observe`."""
        by_tp = self._by_tp
        forward = Outcome.FORWARD
        for msg in msgs:
            if msg.error() is not None:
                self._consumer_error(msg)
                continue
            topic, p = msg.topic(), msg.partition()
            owned = by_tp.get((topic, p))
            if owned is None:
                continue
            off = msg.offset()
            owned.next_offsets[topic] = off + 1
            owned.dirty = True
            headers = msg.headers()
            fast = data_envelope(headers)
            if fast is None or owned.route.settings.shadow is not None:
                self._observe(owned, msg, topic, off, headers)
                continue
            version, t = fast
            router = owned.router
            written = msg.timestamp()[1]
            if router.suppresses(version, t, written):
                continue
            d = router.decide(Incoming(version, t, None, msg.key(), msg.value(), False, None,
                                       Ref(topic, off, headers, owned.out_pos), written))
            if d.outcome is forward and not owned.skip:
                self._queue_forward(owned, topic, off, headers, msg.key(), msg.value())
            else:
                self._act_owned(owned, [d])

    def _observe(self, owned: Owned, msg: Message, topic: str, off: int,
                 headers: list[tuple[str, bytes]] | None) -> None:
        ref = Ref(topic, off, headers, owned.out_pos)
        try:
            tag = parse_headers(headers)
        except HeaderError as exc:
            inc = Incoming("?", None, key=msg.key(), value=msg.value(), error=str(exc),
                           ref=ref)
        else:
            inc = Incoming(tag.version, tag.event_time, tag.watermark, msg.key(), msg.value(),
                           tag.kind is RecordKind.HEARTBEAT, None, ref, msg.timestamp()[1])
        self._act_owned(owned, owned.router.observe(inc))

    def _consumer_error(self, msg: Message) -> None:
        err = msg.error()
        if err.fatal():
            raise KafkaException(err)
        if err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer: %s", err.str())

    def _apply_everywhere(self, plan: CutoverPlan) -> None:
        for owned in self.owned.values():
            if owned.route.settings.name == plan.route:
                self._act_owned(owned, owned.router.apply_plan(plan))
                owned.dirty = True
        self.board.changed = True

    def _act(self, rt: RouteRuntime, decisions: list[Decision]) -> None:
        for d in decisions:
            if d.outcome is not Outcome.HOLD:
                raise AssertionError("a fresh partition released records")

    def _act_owned(self, owned: Owned, decisions: list[Decision]) -> None:
        rs = owned.route.settings
        p = owned.partition
        for d in decisions:
            outcome = d.outcome
            if outcome is Outcome.HOLD or outcome is Outcome.DUPLICATE:
                continue
            rec = d.record
            ref: Ref = rec.ref
            if outcome is Outcome.FORWARD and (ref.topic, ref.offset) in owned.skip:
                continue  # already in the output log (read back at takeover)
            if outcome is Outcome.FORWARD:
                self._queue_forward(owned, ref.topic, ref.offset, ref.headers, rec.key,
                                    rec.value)
                continue
            if outcome is not Outcome.SUPPRESS or rs.shadow is not None:
                _mark_undelivered(owned, ref.topic, ref.offset)
            if outcome is Outcome.DEAD_LETTER:
                hdrs = list(ref.headers or ())
                hdrs.append((ERROR, (d.reason or "unknown").encode()))
                self._outputs.append((rs.dead_letter, p, rec.key, rec.value, hdrs))  # type: ignore[arg-type]
            elif outcome is Outcome.SUPPRESS and rs.shadow is not None:
                self._outputs.append((rs.shadow, p, rec.key, rec.value, list(ref.headers or ())))

    def _queue_forward(self, owned: Owned, topic: str, off: int,
                       headers: list[tuple[str, bytes]] | None, key: bytes | None,
                       value: bytes | None) -> None:
        """Queue raw record (topic, off) for output partition p, with its ``bg.src``."""
        _mark_undelivered(owned, topic, off)
        p = owned.partition
        hdrs = list(headers or ())
        hdrs.append((SRC, f"{topic}:{p}:{off}".encode()))
        self._outputs.append((owned.route.settings.output, p, key, value, hdrs))
        owned.out_pos += 1
        owned.queued += 1

    def _resume_offsets(self, owned: Owned) -> tuple[dict[str, int], int]:
        offsets = dict(owned.next_offsets)
        for topic, low in owned.undelivered.items():
            if low < offsets.get(topic, low + 1):
                offsets[topic] = low
        readback = owned.out_pos
        for rec in owned.router.held:
            ref: Ref = rec.ref
            if ref.offset < offsets.get(ref.topic, ref.offset + 1):
                offsets[ref.topic] = ref.offset
            readback = min(readback, ref.out_pos)
        if owned.ahead:
            owned.ahead = [a for a in owned.ahead if a[1] >= offsets.get(a[0], 0)]
            readback = min([readback, *(a[2] for a in owned.ahead)])
        # Outputs queued in this batch are not delivered yet: read back from before them.
        return offsets, readback

    def _complete_batch(self) -> None:
        assert self._producer is not None and self._consumer is not None
        dirty = [o for o in self.owned.values() if o.dirty]
        if not dirty and not self._outputs:
            return
        pending_out = len(self._outputs)
        ckpts: list[Checkpoint] = []
        commits: list[TopicPartition] = []
        for owned in dirty:
            offsets, readback = self._resume_offsets(owned)
            readback = min(readback, owned.out_pos - owned.queued)
            owned.seq += 1
            rebuild_from = self._rebuild_from(owned)
            ckpts.append(Checkpoint(
                route=owned.route.settings.name, partition=owned.partition, seq=owned.seq,
                offsets=offsets, snapshot=owned.router.snapshot(), readback_from=readback,
                rebuild_from=rebuild_from, worker=self.worker_id, owner_gen=owned.owner_gen))
            commits.extend(TopicPartition(t, owned.partition, o) for t, o in offsets.items())
        self._check_ownership()
        if ckpts:
            write_checkpoints(self._producer, self.ckpt_topic, ckpts)
            if FAILPOINT == "after-checkpoint" and self._outputs:
                log.error("failpoint after-checkpoint: exiting before the batch's output")
                os._exit(137)
        if self._outputs:
            self._check_ownership()  # again, as late as possible before writing
            self._fence_foreign_writes()
            self._produce_outputs()
            self._check_ownership(after_write=True)
        for owned in dirty:
            owned.store.put_meta("seq", str(owned.seq).encode())
            owned.store.flush()
            owned.queued = 0
            # Delivered now: the next checkpoint (written at the next step, even an idle one)
            # may resume past these records.
            owned.dirty = bool(owned.undelivered)
            owned.undelivered.clear()
        if commits:
            try:
                self._consumer.commit(offsets=commits, asynchronous=True)
            except KafkaException as exc:
                log.warning("offset commit: %s", exc)
        if time.monotonic() - self._last_purge > 30:
            self._purge()
        self.board.changed = self.board.changed or pending_out > 0

    def _rebuild_from(self, owned: Owned) -> int:
        h = owned.router.horizon
        marks = owned.rebuild_marks
        marks.append((h if h is not None else 0, owned.out_pos - owned.queued))
        if h is not None:
            limit = h - owned.route.settings.dedup.retention_ms
            while len(marks) > 1 and marks[1][0] < limit:
                marks.popleft()
            if marks[0][0] < limit:
                owned.rebuild_from = max(owned.rebuild_from, marks[0][1])
        if len(marks) > 10_000:  # keep the deque small; an earlier start is always safe
            for _ in range(len(marks) // 2):
                marks.popleft()
        return owned.rebuild_from

    def _check_ownership(self, after_write: bool = False) -> None:
        """Only the owner of raw partition p writes output partition p.

        The group can move a partition only after this worker misses ``max.poll.interval.ms``
        (librdkafka then leaves the group) or its session expires (the process stalled, or
        lost the coordinator). Rebalance callbacks run only in ``consume``, so the assignment
        is checked together with the time since the last poll; called before the checkpoint
        write, right before producing, and after delivery (a late discovery stops the worker:
        the new owner's foreign-write check, :meth:`_fence_foreign_writes`, deals with what
        was written).
        """
        assert self._consumer is not None
        if time.monotonic() - self._last_poll > self._max_poll_s * 0.8:
            what = ("the batch's output was written" if after_write
                    else "the batch took")
            raise RuntimeError(f"{what} later than max.poll.interval.ms allows; the group may "
                               "have moved partitions away; restarting the worker")
        assigned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        for (route, p) in list(self.owned):
            rt = self.routes[route]
            if not any((t, p) in assigned for t in rt.settings.inputs):
                raise RuntimeError(f"partition {route}/{p} is no longer assigned to this "
                                   "worker; refusing to write its output")

    def _fence_foreign_writes(self) -> None:
        """Before producing, look for output records this worker did not write.

        A previous owner that stalled after its last ownership check (a zombie) can still
        deliver one batch after this worker read the output back. ListOffsets(LATEST) above
        the end this worker knows means someone else wrote (true on the test broker too,
        whose answer is the last batch's base offset + 1: never above the real end, and above
        our known end only if a batch started there). Those records are read and absorbed:
        their raw offsets join the skip set, their identities the dedup store, and queued
        outputs they already cover are dropped. One ListOffsets per output partition with
        queued records, per batch (~0.3 ms on loopback).
        """
        assert self._probe is not None
        for owned in self.owned.values():
            if not owned.queued:
                continue
            tp = TopicPartition(owned.route.settings.output, owned.partition)
            try:
                _, latest = self._probe.get_watermark_offsets(tp, timeout=10, cached=False)
            except KafkaException as exc:
                raise RuntimeError(f"cannot read the end of output {tp.topic}:{tp.partition} "
                                   f"({exc}); refusing to write it unchecked") from None
            if latest > owned.known_end:
                self._absorb_foreign(owned, owned.known_end, ours={})

    def _absorb_foreign(self, owned: Owned, start: int, ours: dict[bytes, int]) -> None:
        """Read output ``owned.partition`` from ``start`` to its end and take in every record
        not in ``ours`` (bg.src -> how many of them this worker delivered since ``start``):
        skip set, dedup store, readback bound; drop queued outputs they already cover."""
        rs = owned.route.settings
        p = owned.partition
        rb = ReadBack(end=start)
        resume, _ = self._resume_offsets(owned)
        foreign: dict[bytes, tuple[str, int] | None] = {}
        twice = 0
        for msg in read_to_end(client_conf(self.settings), rs.output, {p: start}):
            src_raw = next((v for k, v in msg.headers() or () if k == SRC), b"")
            if ours.get(src_raw, 0) > 0:
                ours[src_raw] -= 1   # one of ours
                continue
            src = note(rb, msg, resume, owned.route.identity, owned.store)
            if src_raw in foreign or src_raw in ours:
                twice += 1           # a second copy of a record is in the output
            foreign[src_raw] = src
            if src is not None:
                owned.skip.add(src)
                if src[1] >= resume.get(src[0], 0):
                    owned.ahead.append((src[0], src[1], msg.offset()))
        owned.store.flush()
        dropped: set[bytes] = set()
        if foreign and owned.queued:
            keep = []
            for o in self._outputs:
                if o[0] == rs.output and o[1] == p and o[4] and o[4][-1][1] in foreign:
                    dropped.add(o[4][-1][1])
                    continue
                keep.append(o)
            self._outputs[:] = keep
            owned.queued -= len(dropped)
            c = owned.router.counters
            c.forwarded -= len(dropped)
            c.duplicates += len(dropped)
        # Foreign copies of raw records this worker had already decided (and not just now):
        # if it forwarded them, they are in the output twice.
        passed = sum(1 for raw, src in foreign.items() if raw not in dropped and raw not in ours
                     and src is not None and src[1] < resume.get(src[0], 0))
        owned.known_end = max(rb.end, start)
        owned.out_pos = owned.known_end + owned.queued
        report = log.error if twice or passed else log.warning
        report("output %s:%d: %d records from another writer (a previous owner that had not yet "
               "noticed losing the partition) at offsets %d..%d; %d queued outputs they cover "
               "were dropped; %d are certainly and %d possibly in the output twice",
               rs.output, p, len(foreign), start, owned.known_end - 1, len(dropped), twice,
               passed)

    def _produce_outputs(self) -> None:
        """Produce the batch and wait; then check that each output partition received exactly
        our records, contiguously after the end we knew (anything else in between was written
        by another writer, or twice by a retry: absorbed and reported)."""
        assert self._producer is not None
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        def tracker(owned: Owned) -> Callable[[Any, Any], None]:
            def on_output(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                    return
                o = msg.offset()
                if o >= owned.delivered_to:
                    owned.delivered_to = o + 1
            return on_output

        callbacks: dict[tuple[str, int], Callable[[Any, Any], None]] = {}
        counts: dict[tuple[str, int], int] = {}
        for owned in self.owned.values():
            if owned.queued:
                key = (owned.route.settings.output, owned.partition)
                owned.delivered_to = owned.known_end
                callbacks[key] = tracker(owned)
                counts[key] = 0
        produce = self._producer.produce
        poll = self._producer.poll
        for topic, p, key, value, headers in self._outputs:
            cb = callbacks.get((topic, p), on_delivery)
            while True:
                try:
                    produce(topic, value, key, partition=p, headers=headers, on_delivery=cb)
                    break
                except BufferError:
                    poll(0.05)
        batch, self._outputs = self._outputs, []
        budget = self._max_poll_s * 0.9 - (time.monotonic() - self._last_poll)
        left = self._producer.flush(max(budget, 1.0))
        if errors or left:
            raise RuntimeError("output produce failed "
                               f"({errors[0] if errors else f'{left} not delivered'}); the "
                               "worker stops and resumes from its checkpoint")
        for owned in self.owned.values():
            if not owned.queued:
                continue
            start, n = owned.known_end, owned.queued
            owned.queued = 0
            if owned.delivered_to != start + n:
                out, p = owned.route.settings.output, owned.partition
                ours: dict[bytes, int] = {}
                for o in batch:
                    if o[0] == out and o[1] == p:
                        src = o[4][-1][1]
                        ours[src] = ours.get(src, 0) + 1
                self._absorb_foreign(owned, start, ours)
            owned.known_end = max(owned.known_end, owned.delivered_to)
            owned.out_pos = owned.known_end

    def _purge(self) -> None:
        self._last_purge = time.monotonic()
        for owned in self.owned.values():
            h = owned.router.horizon
            if h is not None:
                owned.store.purge(h - owned.route.settings.dedup.retention_ms)
