"""The worker's status: built from the partitions it owns, published on the status topic at
each change and every ``status_interval_s``, and kept for the HTTP endpoints.

A worker knows only its own partitions; its message lists them (with the plan epoch they run,
which is the message's ``epoch``), and ``cutover status``/``wait`` merge the newest message of
every worker per partition and recompute readiness over all partitions with the same function.

The board is given what it publishes (the routes' partition counts, the plans held, a view of
each owned partition's decision state, and a publish callable); it knows nothing of the data
path that owns those.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from cutover.plan import CutoverPlan, utcnow
from cutover.readiness import PartitionProgress, progress_of, readiness
from cutover.status import Counters, PartitionStatus, PlanRejectedEvent, RouteStatus
from router.control import ControlEvent, PlanAccepted
from router.decision import PartitionCounters

log = logging.getLogger("cutover.router")


class PartitionView(Protocol):
    """What the board reads of an owned partition (``router.decision.PartitionRouter``)."""

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

    # -- building ---------------------------------------------------------------------------

    def build(self, route: str) -> RouteStatus:
        num_partitions = self.routes[route]
        plan = self.plans.get(route)
        parts: dict[int, PartitionStatus] = {}
        progress: dict[int, PartitionProgress] = {}
        counters = Counters()
        for p, pr in sorted(self.partitions(route).items()):
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
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str) -> None:
            lines.append(f"# HELP cutover_{name} {help_}")
            lines.append(f"# TYPE cutover_{name} {kind}")

        with self._lock:
            statuses = list(self.latest.values())
        per_route: list[tuple[str, str, str, Callable[[RouteStatus], int]]] = [
            ("forwarded_total", "counter", "records forwarded to the output topic",
             lambda s: s.counters.forwarded),
            ("duplicates_total", "counter", "duplicate records removed",
             lambda s: s.counters.duplicates),
            ("dead_lettered_total", "counter", "records sent to the dead-letter topic",
             lambda s: s.counters.dead_lettered),
            ("held", "gauge", "records held for ordered handover", lambda s: s.counters.held),
            ("pauses_total", "counter", "times a partition reached max_held and paused",
             lambda s: s.counters.pauses),
            ("reread_total", "counter", "records consumed while their partition's commit "
             "failed, dropped and read again from its checkpoint", lambda s: s.counters.reread),
            ("paused_partitions", "gauge", "partitions paused at max_held now",
             lambda s: sum(ps.paused for ps in s.partitions.values())),
            ("plan_epoch", "gauge", "epoch of the plan in force", lambda s: s.epoch or 0),
        ]
        for name, kind, help_, value in per_route:
            metric(name, kind, help_)
            lines.extend(f'cutover_{name}{{route="{s.route}"}} {value(s)}' for s in statuses)
        metric("suppressed_total", "counter", "records suppressed (not primary), per version")
        for s in statuses:
            for v, n in sorted(s.counters.suppressed.items()):
                lines.append(f'cutover_suppressed_total{{route="{s.route}",version="{v}"}} {n}')
        metric("transition_state", "gauge", "1 for the current transition state")
        for s in statuses:
            lines.append(f'cutover_transition_state{{route="{s.route}",'
                         f'state="{s.transition.state.value}"}} 1')
        metric("watermark_ms", "gauge", "a version's event-time watermark on a partition")
        for s in statuses:
            for p, ps in sorted(s.partitions.items()):
                for v, wm in sorted(ps.watermarks.items()):
                    lines.append(f'cutover_watermark_ms{{route="{s.route}",partition="{p}",'
                                 f'version="{v}"}} {wm}')
        metric("horizon_ms", "gauge", "largest event time routed on a partition")
        for s in statuses:
            for p, ps in sorted(s.partitions.items()):
                if ps.horizon is not None:
                    lines.append(f'cutover_horizon_ms{{route="{s.route}",partition="{p}"}} '
                                 f"{ps.horizon}")
        return "\n".join(lines) + "\n"
