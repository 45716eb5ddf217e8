"""The worker's status: built from the partitions it owns, published on the status topic at
each change and every ``status_interval_s``, and kept for the HTTP endpoints.

A worker knows only its own partitions; its message lists them (with the plan epoch they run,
which is the message's ``epoch``), and ``cutover status``/``wait`` merge the newest message of
every worker per partition and recompute readiness over all partitions with the same function.

The board is given what it publishes (the routes' partition counts, the plans held, a view of
each owned partition's decision state, and a publish callable); it knows nothing of the data
path that owns those.

Its ``/metrics`` follow Prometheus' conventions: a ``_total`` counter counts what this worker
did since it started and never goes down, though a rebalance moves partitions away (a
partition's decision state, whose counters start at zero, is retired into the
:class:`CounterLedger` when it goes); times are in seconds; a count is a counter, not a gauge.
The status topic's counters stay what they were (the partitions owned now), since ``cutover
status`` merges them across workers.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import confluent_kafka

from cutover.plan import CutoverPlan, utcnow
from cutover.readiness import PartitionProgress, progress_of, readiness
from cutover.status import Counters, PartitionStatus, PlanRejectedEvent, RouteStatus
from router.base.metrics import family_header
from router.rule.decision import PartitionCounters
from router.worker.control import ControlEvent, PlanAccepted

log = logging.getLogger("cutover.router")


class PartitionView(Protocol):
    """What the board reads of an owned partition (``router.rule.decision.PartitionRouter``)."""

    @property
    def epoch(self) -> int | None: ...
    @property
    def boundary(self) -> int | None: ...
    @property
    def horizon(self) -> int | None: ...
    @property
    def watermarks(self) -> dict[str, int]: ...
    @property
    def pinned(self) -> tuple[int, ...]: ...
    @property
    def held(self) -> list[Any]: ...
    @property
    def paused(self) -> bool: ...
    @property
    def counters(self) -> PartitionCounters: ...


class DeadLetterReason(StrEnum):
    """What a dead-letter's ``bg.error`` sentence is about: a label of bounded cardinality."""

    BAD_HEADERS = "bad_headers"          # missing or malformed bg.* headers
    POISON_TIMESTAMP = "poison_timestamp"
    BEYOND_RETENTION = "beyond_retention"  # older than the dedup retention below the horizon
    IDENTITY = "identity"                # the identity fields cannot be read from the value
    OVERSIZE = "oversize"                # larger than the output topic takes
    OTHER = "other"


def dead_letter_reason(sentence: str) -> DeadLetterReason:
    """The kind of a dead letter, from the reason the router wrote in its ``bg.error``."""
    text = sentence.lower()
    if "poison timestamp" in text:
        return DeadLetterReason.POISON_TIMESTAMP
    if "dedup retention" in text:
        return DeadLetterReason.BEYOND_RETENTION
    if "identity" in text:
        return DeadLetterReason.IDENTITY
    if "max.message.bytes" in text:
        return DeadLetterReason.OVERSIZE
    if "bg." in text or "header" in text:
        return DeadLetterReason.BAD_HEADERS
    return DeadLetterReason.OTHER


@dataclass
class _Sighting:
    owner: int          # id() of the partition's decision state when last seen
    counters: Counters


class CounterLedger:
    """This worker's counters since it started, per route and partition: what the decision
    states it owns now have counted, plus, for each state it no longer has (the partition moved
    away, or was taken over again from its checkpoint), what that state had counted when last
    seen. A state is told apart by its identity, or by a counter that went down."""

    def __init__(self) -> None:
        self._retired: dict[tuple[str, int], Counters] = {}
        self._seen: dict[tuple[str, int], _Sighting] = {}

    def observe(self, route: str, partitions: Mapping[int, PartitionView]) -> None:
        for (r, p), seen in list(self._seen.items()):
            if r != route:
                continue
            pr = partitions.get(p)
            if pr is None or id(pr) != seen.owner or _went_down(seen.counters, _counters(pr)):
                self._retire(route, p)
        for p, pr in partitions.items():
            self._seen[(route, p)] = _Sighting(id(pr), _counters(pr))

    def release(self, route: str, partition: int, counters: PartitionCounters) -> None:
        """The partition's decision state is gone: keep what it counted, to its last record."""
        self._seen[(route, partition)] = _Sighting(-1, _counters_of(counters))
        self._retire(route, partition)

    def _retire(self, route: str, partition: int) -> None:
        seen = self._seen.pop((route, partition))
        before = self._retired.get((route, partition), Counters())
        self._retired[(route, partition)] = before.add(seen.counters)

    def totals(self, route: str) -> dict[int, Counters]:
        """Per partition, everything this worker counted for ``route`` since it started."""
        out: dict[int, Counters] = {}
        for (r, p), c in self._retired.items():
            if r == route:
                out[p] = c
        for (r, p), seen in self._seen.items():
            if r == route:
                out[p] = out.get(p, Counters()).add(seen.counters)
        return out


def _counters_of(c: PartitionCounters) -> Counters:
    return Counters(forwarded=c.forwarded, suppressed=dict(c.suppressed),
                    duplicates=c.duplicates, dead_lettered=c.dead_lettered, pauses=c.pauses,
                    reread=c.reread)


def _counters(pr: PartitionView) -> Counters:
    return _counters_of(pr.counters)


def _went_down(before: Counters, now: Counters) -> bool:
    return (now.forwarded < before.forwarded or now.duplicates < before.duplicates
            or now.dead_lettered < before.dead_lettered or now.pauses < before.pauses
            or now.reread < before.reread
            or any(now.suppressed.get(v, 0) < n for v, n in before.suppressed.items()))


# Upper bounds of the added-latency histogram, seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class Histogram:
    """Observations in cumulative-at-export buckets (Prometheus' histogram)."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    count: int = 0
    sum: float = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += n
                break
        self.count += n
        self.sum += value * n


class StatusBoard:
    def __init__(self, worker_id: str, *, routes: Mapping[str, int],
                 plans: Mapping[str, CutoverPlan],
                 partitions: Callable[[str], Mapping[int, PartitionView]],
                 publish: Callable[[str, bytes], None], interval_s: float) -> None:
        """``routes``: route -> number of partitions; ``plans``: route -> the plan held;
        ``partitions(route)``: partition -> its decision state, for the partitions owned now;
        ``publish(route, value)``: one status message. The mappings are read at each tick."""
        self.worker_id = worker_id
        self.routes = routes
        self.plans = plans
        self.partitions = partitions
        self.publish = publish
        self.interval_s = interval_s
        self.changed = True
        self._last_publish = 0.0
        self._last_key: dict[str, tuple[Any, ...]] = {}
        self._lock = threading.Lock()
        self.latest: dict[str, RouteStatus] = {}
        self.rejections: dict[str, PlanRejectedEvent] = {}
        # Metrics only: this worker's counts since it started (see the module's docstring).
        self.ledger = CounterLedger()
        self.totals: dict[str, dict[int, Counters]] = {}
        self.plan_rejections: dict[str, int] = {}
        self.dead_letters: dict[tuple[str, DeadLetterReason], int] = {}
        self.consumer_lag: dict[tuple[str, int], int] = {}
        self.added_latency: dict[str, Histogram] = {}
        self.started_at = time.time()
        self.last_tick_at: float | None = None

    # -- what the data path reports for the metrics -----------------------------------------

    def partition_released(self, route: str, partition: int,
                           counters: PartitionCounters) -> None:
        """The data path lets a partition go (rebalance, or before it is taken over again from
        its checkpoint): what its state counted stays in this worker's counters, and its lag
        is no longer this worker's to report (its new owner reports it)."""
        with self._lock:
            self.ledger.release(route, partition, counters)
            self.consumer_lag.pop((route, partition), None)

    def dead_lettered(self, route: str, reason: str, n: int = 1) -> None:
        """``n`` records went to the dead-letter topic with ``reason`` (their ``bg.error``)."""
        key = (route, dead_letter_reason(reason))
        with self._lock:
            self.dead_letters[key] = self.dead_letters.get(key, 0) + n

    def lag(self, route: str, partition: int, records: int) -> None:
        """Records of the raw partition not yet consumed (its high watermark less the position)."""
        with self._lock:
            self.consumer_lag[(route, partition)] = max(0, records)

    def latency(self, route: str, seconds: float, n: int = 1) -> None:
        """``n`` records written to the output ``seconds`` after their raw record's timestamp."""
        with self._lock:
            self.added_latency.setdefault(route, Histogram()).observe(seconds, n)

    # -- building ---------------------------------------------------------------------------

    def build(self, route: str) -> RouteStatus:
        num_partitions = self.routes[route]
        plan = self.plans.get(route)
        parts: dict[int, PartitionStatus] = {}
        progress: dict[int, PartitionProgress] = {}
        counters = Counters()
        owned = self.partitions(route)
        with self._lock:
            self.ledger.observe(route, owned)
            self.totals[route] = self.ledger.totals(route)
        for p, pr in sorted(owned.items()):
            held = len(pr.held)
            ps = PartitionStatus(epoch=pr.epoch, boundary=pr.boundary, horizon=pr.horizon,
                                 watermarks=dict(pr.watermarks), pinned=pr.pinned, held=held,
                                 paused=pr.paused)
            parts[p] = ps
            progress[p] = progress_of(ps)
            c = pr.counters
            counters = counters.add(Counters(
                forwarded=c.forwarded, suppressed=dict(c.suppressed), duplicates=c.duplicates,
                dead_lettered=c.dead_lettered, held=held, pauses=c.pauses,
                reread=c.reread))
        transition = readiness(plan, progress, num_partitions, utcnow())
        return RouteStatus(route=route, epoch=plan.epoch if plan else None,
                           transition=transition, partitions=parts,
                           num_partitions=num_partitions, counters=counters, plan=plan,
                           worker=self.worker_id)

    # -- publishing -------------------------------------------------------------------------

    def tick(self) -> None:
        now = time.monotonic()
        periodic = now - self._last_publish >= self.interval_s
        for route in self.routes:
            status = self.build(route)
            key = (status.epoch, status.transition.state, tuple(status.partitions),
                   len(status.transition.holdups))
            if periodic or self.changed or key != self._last_key.get(route):
                self.publish(route, status.model_dump_json(by_alias=True).encode())
                self._last_key[route] = key
            with self._lock:
                self.latest[route] = status
        if periodic or self.changed:
            self._last_publish = now
        self.changed = False
        self.last_tick_at = time.time()

    def control_event(self, event: ControlEvent) -> None:
        if isinstance(event, PlanAccepted):
            self.changed = True
            return
        rejected = event.rejected
        route = event.route or rejected.route
        if route is None:
            log.warning("control record rejected: %s", rejected.reason)
            return
        status = PlanRejectedEvent(route=route, epoch=rejected.epoch, reason=rejected.reason,
                                   plan=self.plans.get(route), worker=self.worker_id)
        with self._lock:
            self.rejections[route] = status
            self.plan_rejections[route] = self.plan_rejections.get(route, 0) + 1
        self.publish(route, status.model_dump_json(by_alias=True).encode())

    # -- HTTP views -------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "worker": self.worker_id,
                "routes": {r: s.model_dump(mode="json", by_alias=True)
                           for r, s in self.latest.items()},
                "rejected": {r: e.model_dump(mode="json") for r, e in self.rejections.items()},
            }

    def prometheus(self) -> str:
        with self._lock:
            statuses = list(self.latest.values())
            snapshot = _MetricsSnapshot(
                totals={r: dict(t) for r, t in self.totals.items()},
                plan_rejections=dict(self.plan_rejections),
                dead_letters=dict(self.dead_letters), consumer_lag=dict(self.consumer_lag),
                added_latency={r: (list(h.counts), h.count, h.sum, h.buckets)
                               for r, h in self.added_latency.items()})
        return render_metrics(statuses, snapshot, self.worker_id, self.last_tick_at)


@dataclass(frozen=True)
class _MetricsSnapshot:
    totals: dict[str, dict[int, Counters]]
    plan_rejections: dict[str, int]
    dead_letters: dict[tuple[str, DeadLetterReason], int]
    consumer_lag: dict[tuple[str, int], int]
    added_latency: dict[str, tuple[list[int], int, float, tuple[float, ...]]]




def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def render_metrics(statuses: list[RouteStatus], m: _MetricsSnapshot, worker: str,
                   last_tick_at: float | None) -> str:
    """The Prometheus text of one worker."""
    lines: list[str] = []

    def metric(name: str) -> None:
        lines.extend(family_header(name))

    metric("build_info")
    lines.append(f'cutover_build_info{{version="{_package_version("cutover-streams")}",'
                 f'python="{platform.python_version()}",'
                 f'confluent_kafka="{confluent_kafka.version()}",'
                 f'librdkafka="{confluent_kafka.libversion()[0]}",worker="{worker}"}} 1')
    totals = {s.route: m.totals.get(s.route, {}) for s in statuses}

    def total(route: str, pick: Callable[[Counters], int]) -> int:
        return sum(pick(c) for c in totals[route].values())

    for name, pick in (("forwarded_total", lambda c: c.forwarded),
                       ("duplicates_total", lambda c: c.duplicates),
                       ("dead_lettered_total", lambda c: c.dead_lettered),
                       ("pauses_total", lambda c: c.pauses),
                       ("reread_total", lambda c: c.reread)):
        metric(name)
        lines.extend(f'cutover_{name}{{route="{s.route}"}} {total(s.route, pick)}'
                     for s in statuses)
    metric("partition_forwarded_total")
    for s in statuses:
        for p, c in sorted(totals[s.route].items()):
            lines.append(f'cutover_partition_forwarded_total{{route="{s.route}",'
                         f'partition="{p}"}} {c.forwarded}')
    metric("suppressed_total")
    for s in statuses:
        versions: dict[str, int] = {}
        for c in totals[s.route].values():
            for v, n in c.suppressed.items():
                versions[v] = versions.get(v, 0) + n
        for v, n in sorted(versions.items()):
            lines.append(f'cutover_suppressed_total{{route="{s.route}",version="{v}"}} {n}')
    metric("dead_letters_total")
    for (route, reason), n in sorted(m.dead_letters.items()):
        lines.append(f'cutover_dead_letters_total{{route="{route}",reason="{reason.value}"}} {n}')
    metric("plan_rejections_total")
    for s in statuses:
        lines.append(f'cutover_plan_rejections_total{{route="{s.route}"}} '
                     f"{m.plan_rejections.get(s.route, 0)}")
    per_route: list[tuple[str, Callable[[RouteStatus], int]]] = [
        ("held_records", lambda s: s.counters.held),
        ("held", lambda s: s.counters.held),
        ("paused_partitions", lambda s: sum(ps.paused for ps in s.partitions.values())),
        ("plan_epoch", lambda s: s.epoch or 0),
    ]
    for name, value in per_route:
        metric(name)
        lines.extend(f'cutover_{name}{{route="{s.route}"}} {value(s)}' for s in statuses)
    metric("transition_state")
    for s in statuses:
        lines.append(f'cutover_transition_state{{route="{s.route}",'
                     f'state="{s.transition.state.value}"}} 1')
    for name, scale in (("watermark_seconds", 1000.0), ("watermark_ms", 1.0)):
        metric(name)
        for s in statuses:
            for p, ps in sorted(s.partitions.items()):
                for v, wm in sorted(ps.watermarks.items()):
                    lines.append(f'cutover_{name}{{route="{s.route}",partition="{p}",'
                                 f'version="{v}"}} {_scaled(wm, scale)}')
    for name, scale in (("horizon_seconds", 1000.0), ("horizon_ms", 1.0)):
        metric(name)
        for s in statuses:
            for p, ps in sorted(s.partitions.items()):
                if ps.horizon is not None:
                    lines.append(f'cutover_{name}{{route="{s.route}",partition="{p}"}} '
                                 f"{_scaled(ps.horizon, scale)}")
    metric("watermark_lag_seconds")
    for s in statuses:
        for p, ps in sorted(s.partitions.items()):
            for v, wm in sorted(ps.watermarks.items()):
                if ps.horizon is not None:
                    lines.append(f'cutover_watermark_lag_seconds{{route="{s.route}",'
                                 f'partition="{p}",version="{v}"}} '
                                 f"{max(0, ps.horizon - wm) / 1000:g}")
    metric("consumer_lag_records")
    for (route, p), n in sorted(m.consumer_lag.items()):
        lines.append(f'cutover_consumer_lag_records{{route="{route}",partition="{p}"}} {n}')
    metric("added_latency_seconds")
    for route, (counts, count, total_s, buckets) in sorted(m.added_latency.items()):
        running = 0
        for upper, n in zip(buckets, counts, strict=True):
            running += n
            lines.append(f'cutover_added_latency_seconds_bucket{{route="{route}",'
                         f'le="{upper:g}"}} {running}')
        lines.append(f'cutover_added_latency_seconds_bucket{{route="{route}",le="+Inf"}} '
                     f"{count}")
        lines.append(f'cutover_added_latency_seconds_sum{{route="{route}"}} {total_s:g}')
        lines.append(f'cutover_added_latency_seconds_count{{route="{route}"}} {count}')
    if last_tick_at is not None:
        metric("status_updated_timestamp_seconds")
        lines.append(f"cutover_status_updated_timestamp_seconds {last_tick_at:.3f}")
    return "\n".join(lines) + "\n"


def _scaled(ms: int, scale: float) -> str:
    return str(ms) if scale == 1.0 else f"{ms / scale:.3f}"
