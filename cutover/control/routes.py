"""The operator's side of the control and status topics, as a library: the routes' state
read from both topics (``cutover status``, ``wait``, ``switch``, the demo and the tests use it)
and publishing a plan.

The reader keeps, for each partition, the newest report of it in any worker's status message,
and recomputes readiness over all partitions with :func:`cutover.readiness.readiness`, the
same function the workers use. A partition between owners (its worker released it in a
rebalance and the next has not taken it yet, seconds on Apache Kafka) keeps its last report:
taking only each worker's newest message would show it unreported, and a route that was clear
to tear down would read PENDING for the length of every rebalance. The commands on top
(cutover.cli) turn its named errors into the CLI's sentences and exit codes.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, cast

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from pydantic import ValidationError

from cutover.kafka_errors import denial, principal_of
from cutover.kafka_types import DataMessage
from cutover.plan import CutoverPlan, PlanRejected, parse_plan, plan_key_from_env, sign_plan, utcnow
from cutover.readiness import PartitionProgress, progress_of, readiness
from cutover.rollout.journal import RolloutRecord, parse_record, route_of_key
from cutover.settings import RouterSettings
from cutover.status import (
    Counters,
    PartitionStatus,
    PlanRejectedEvent,
    RouteStatus,
    Transition,
    UnreadableStatus,
    read_status,
)
from router.base.kafka_io import (
    AccessDenied,
    BrokerUnavailable,
    base_conf,
    offsets_range,
    partitions_of,
    reader_conf,
)


class PlanNotPublished(RuntimeError):
    """The control topic did not take the plan (the message says why)."""


# -- where the cluster is -----------------------------------------------------------------------


@dataclass
class Target:
    conf: dict[str, Any]
    control_topic: str
    status_topic: str
    routes: dict[str, int | None] = field(default_factory=dict)  # route -> partitions if known


def target_from_settings(s: RouterSettings, bootstrap: str | None = None) -> Target:
    """The cluster and topics of a router's settings (``bootstrap`` overrides theirs), with
    each route's partition count when its first input topic can be asked."""
    conf = base_conf(bootstrap or s.bootstrap, dict(s.kafka))
    t = Target(conf, s.control_topic, s.status_topic)
    for r in s.routes:
        t.routes[r.name] = _inputs_partitions(conf, r.inputs[0])
    return t


def _inputs_partitions(conf: dict[str, Any], topic: str) -> int | None:
    try:
        return partitions_of(conf, topic)
    except Exception:
        return None


# -- reading state ------------------------------------------------------------------------------


class PartitionReport(NamedTuple):
    """A partition as the newest status message that lists it reports it."""

    status: PartitionStatus
    epoch: int | None        # the partition's own applied epoch (else its message's)
    worker: str
    updated_at: datetime


@dataclass
class RouteView:
    """A route's state merged from every worker's newest status message."""

    route: str
    plan: CutoverPlan | None = None
    control_epoch: int | None = None   # highest epoch seen on the control topic (any validity)
    num_partitions: int | None = None
    partitions: dict[int, PartitionReport] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    workers: dict[str, RouteStatus] = field(default_factory=dict)
    rejections: list[PlanRejectedEvent] = field(default_factory=list)
    rollout: RolloutRecord | None = None    # the newest journal record of a rollout
    rollout_log: list[RolloutRecord] = field(default_factory=list)  # read by the last refresh
    # worker -> why its newest status message could not be read (a newer worker, usually)
    unreadable: dict[str, str] = field(default_factory=dict)

    def progress(self) -> dict[int, PartitionProgress]:
        """Each partition's own applied epoch and effective boundary, as its owner published
        them (a partition status without them falls back to its message's epoch)."""
        return {p: progress_of(ps, epoch) for p, (ps, epoch, _, _) in self.partitions.items()}

    def between_owners(self) -> set[int]:
        """Partitions reported but listed by no worker's newest message: released in a
        rebalance and not taken yet (or their last owner stopped). They show their last report."""
        listed = {p for w in self.workers.values() for p in w.partitions}
        return set(self.partitions) - listed

    def unreadable_note(self) -> str | None:
        """One sentence on the workers whose newest status this version cannot read."""
        if not self.unreadable:
            return None
        who = "; ".join(f"{w}: {why}" for w, why in sorted(self.unreadable.items()))
        return (f"cannot read the newest status of {len(self.unreadable)} worker(s) ({who}); "
                "they are likely newer than this cutover: upgrade it to the workers' version "
                "(until then their partitions show their last readable status, or none)")

    def transition(self) -> Transition:
        n = self.num_partitions or (max(self.partitions) + 1 if self.partitions else 0)
        return readiness(self.plan, self.progress(), n, utcnow())

    def max_horizon(self) -> int | None:
        hs = [ps.horizon for ps, *_ in self.partitions.values() if ps.horizon is not None]
        return max(hs) if hs else None

    def max_watermark(self) -> int | None:
        """The leading watermark of any version on any partition."""
        return max((wm for ps, *_ in self.partitions.values() for wm in ps.watermarks.values()),
                   default=None)


STATUS_TAIL = 1000   # status records per partition read first (the newest of every worker)
CONTROL_TAIL = 1000  # control records per partition read first (plans are rare)


class _Follower:
    """One consumer on one topic, from a bounded tail (or the beginning) on, read
    incrementally: :meth:`read_new` returns what arrived since the last call, up to the end."""

    def __init__(self, conf: dict[str, Any], topic: str, tail: int | None) -> None:
        self.conf, self.topic, self.tail = conf, topic, tail
        self.consumer: Consumer | None = None
        self.pos: dict[int, int] = {}
        self.complete = True   # the tail reached the beginning of every partition

    def _open(self) -> bool:
        n = partitions_of(self.conf, self.topic)
        if n is None:
            return False
        c = Consumer({**reader_conf(self.conf), "fetch.wait.max.ms": 20})
        assign = []
        for p in range(n):
            # ListOffsets(LATEST) is at or below the real end on every broker (the test
            # broker answers the last batch's base + 1): a start from it reads at least
            # ``tail`` records.
            low, high = offsets_range(c, TopicPartition(self.topic, p))
            start = max(low, high - self.tail) if self.tail is not None else low
            self.complete = self.complete and start <= low
            self.pos[p] = start
            assign.append(TopicPartition(self.topic, p, start))
        c.assign(assign)
        self.consumer = c
        return True

    def read_new(self, timeout: float = 30.0) -> list[DataMessage]:
        if self.consumer is None and not self._open():
            return []
        c = self.consumer
        assert c is not None
        out: list[DataMessage] = []
        deadline = time.monotonic() + timeout
        asked = False
        while True:
            msgs = c.consume(5000, 0.02)
            for msg in msgs:
                if msg.error() is None:
                    msg = cast(DataMessage, msg)
                    self.pos[msg.partition()] = msg.offset() + 1
                    out.append(msg)
                elif refused := denial(msg.error(), self.topic, self.conf, "Read"):
                    raise AccessDenied(refused)
            if not msgs:
                # The cached high watermark is the last fetch's: ask the broker once per call,
                # so that a record written before this call is always read by it.
                behind = False
                for p, at in self.pos.items():
                    tp = TopicPartition(self.topic, p)
                    _, high = c.get_watermark_offsets(tp, cached=True)
                    if not asked:
                        with contextlib.suppress(KafkaException):
                            high = max(high, c.get_watermark_offsets(tp, timeout=5)[1])
                    behind = behind or high < 0 or at < high
                asked = True
                if not behind:
                    return out
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"could not read {self.topic} to its end within "
                                        f"{timeout:.0f}s")

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def merge_report(reports: dict[int, PartitionReport], st: RouteStatus) -> None:
    """Fold one status message into ``reports``: each partition it lists replaces the report
    held unless that one is newer. A partition it does not list keeps the report it has."""
    for p, ps in st.partitions.items():
        held = reports.get(p)
        if held is None or st.updated_at >= held.updated_at:
            epoch = ps.epoch if ps.epoch is not None else st.epoch
            reports[p] = PartitionReport(ps, epoch, st.worker, st.updated_at)


@dataclass
class _RouteState:
    plan: CutoverPlan | None = None
    control_epoch: int | None = None
    workers: dict[str, RouteStatus] = field(default_factory=dict)
    partitions: dict[int, PartitionReport] = field(default_factory=dict)
    rejections: list[PlanRejectedEvent] = field(default_factory=list)
    rollout: RolloutRecord | None = None
    rollout_log: list[RolloutRecord] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)


class StateReader:
    """The routes' state from the status and control topics, kept open and read
    incrementally (``cutover wait`` polls one of these).

    Only a tail of each topic is read first: every status message carries the last good plan
    and each worker publishes its partitions every ``status_interval_s``, so the newest
    ``STATUS_TAIL`` records hold the current state. When they do not (a route with no status,
    no plan, or a partition nobody reported in the tail), everything is read from the start.
    """

    def __init__(self, t: Target, route: str | None = None, *,
                 status_tail: int | None = STATUS_TAIL,
                 control_tail: int | None = CONTROL_TAIL) -> None:
        self.t, self.route = t, route
        self._tails = (status_tail, control_tail)
        self._start(*self._tails)

    def _start(self, status_tail: int | None, control_tail: int | None) -> None:
        self.state: dict[str, _RouteState] = {}
        self.status = _Follower(self.t.conf, self.t.status_topic, status_tail)
        self.control = _Follower(self.t.conf, self.t.control_topic, control_tail)
        self.full = status_tail is None and control_tail is None

    def close(self) -> None:
        self.status.close()
        self.control.close()

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _routes(self) -> set[str]:
        return ({self.route} if self.route is not None
                else set(self.t.routes) | set(self.state))

    def _state(self, r: str) -> _RouteState:
        return self.state.setdefault(r, _RouteState())

    def refresh(self) -> dict[str, RouteView]:
        """Read what arrived since the last call; raise :class:`BrokerUnavailable` when a
        topic cannot be read to its end."""
        self._read()
        if not self.full and not (self.status.complete and self.control.complete) \
                and self._lacking():
            self.close()
            self._start(None, None)
            self._read()
        return self.views()

    def _lacking(self) -> bool:
        for r in self._routes():
            st = self.state.get(r)
            if st is None or st.plan is None or not st.workers:
                return True
            n = self.t.routes.get(r) or max((w.num_partitions or 0
                                             for w in st.workers.values()), default=0)
            if any(p not in st.partitions for p in range(n)):
                return True
        return False

    def _read(self) -> None:
        route = self.route
        for rs in self.state.values():
            rs.rollout_log = []
        for msg in self.status.read_new():
            value = msg.value()
            if value is None:
                continue
            journaled = route_of_key(msg.key())
            if journaled is not None:  # a rollout's journal (cutover.rollout.journal)
                if route is None or journaled == route:
                    with contextlib.suppress(ValidationError, ValueError):
                        rec = parse_record(value)
                        rs = self._state(journaled)
                        rs.rollout = rec
                        rs.rollout_log.append(rec)
                continue
            st = read_status(value)
            if st is None:
                continue
            if isinstance(st, UnreadableStatus):
                if route is None or st.route == route:
                    self._state(st.route).unreadable[st.worker] = st.reason
                continue
            if route is not None and st.route != route:
                continue
            rs = self._state(st.route)
            rs.unreadable.pop(st.worker, None)
            if st.plan is not None and (rs.plan is None or st.plan.epoch > rs.plan.epoch):
                rs.plan = st.plan
            if isinstance(st, PlanRejectedEvent):
                rs.rejections.append(st)
                continue
            rs.workers[st.worker] = st
            merge_report(rs.partitions, st)
        key = plan_key_from_env()
        for msg in self.control.read_new():
            try:
                r = (msg.key() or b"").decode()
            except UnicodeDecodeError:
                continue
            if not r or (route is not None and r != route):
                continue
            try:
                data = json.loads(msg.value() or b"null")
                if isinstance(data, dict) and isinstance(data.get("epoch"), int):
                    rs = self._state(r)
                    rs.control_epoch = max(rs.control_epoch or 0, data["epoch"])
                plan = parse_plan(msg.value(), route=r, key=key)
            except (PlanRejected, ValueError, UnicodeDecodeError):
                continue
            rs = self._state(r)
            if rs.plan is None or plan.epoch > rs.plan.epoch:
                rs.plan = plan

    def views(self) -> dict[str, RouteView]:
        """Merge: per partition the newest report of it (see the module docstring)."""
        views: dict[str, RouteView] = {}
        for r in self._routes():
            st = self.state.get(r, _RouteState())
            v = RouteView(r, plan=st.plan, control_epoch=st.control_epoch,
                          num_partitions=self.t.routes.get(r), workers=dict(st.workers),
                          rejections=list(st.rejections), rollout=st.rollout,
                          rollout_log=list(st.rollout_log), unreadable=dict(st.unreadable),
                          partitions=dict(st.partitions))
            views[r] = v
            for w in v.workers.values():
                if w.num_partitions and not v.num_partitions:
                    v.num_partitions = w.num_partitions
            for worker in {rep.worker for rep in v.partitions.values()}:
                v.counters = v.counters.add(v.workers[worker].counters)
        return views


def read_views(t: Target, route: str | None = None) -> dict[str, RouteView]:
    """The routes' merged state now (reads the topics' tails; see :class:`StateReader`)."""
    with StateReader(t, route) as reader:
        return reader.refresh()


# -- publishing a plan ----------------------------------------------------------------------------


def publish_plan(t: Target, plan: CutoverPlan) -> CutoverPlan:
    """Sign (when a plan key is set), check as a router would, and publish ``plan`` on the
    control topic; return what was published. Raise :class:`PlanRejected` when a router would
    reject it, :class:`PlanNotPublished` when the broker did not take it."""
    key = plan_key_from_env()
    if key is not None:
        plan = sign_plan(plan, key)
    parse_plan(plan.to_json(), route=plan.route, key=key)
    producer = Producer(dict(t.conf))
    errors: list[str] = []
    producer.produce(t.control_topic, plan.to_json(), plan.route.encode(),
                     on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
    if producer.flush(15) or errors:
        refused = [r for r in errors if "authorization failed" in r.lower()]
        if refused:
            raise PlanNotPublished(
                f"the broker refused to let {principal_of(t.conf)} publish the plan to "
                f"{t.control_topic} ({refused[0]}); only the operators' identity may write it: "
                "run the command with their credentials (or, if this is an operator's "
                f"identity, grant it Write on {t.control_topic})")
        raise PlanNotPublished(f"could not publish the plan to {t.control_topic} "
                               f"({errors[0] if errors else 'timeout'}); check the broker and "
                               "retry")
    return plan
