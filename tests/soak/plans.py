"""The plans of the soak: the route switches back and forth between the two versions.

Every switch is a new epoch whose timeline is the previous one plus a segment for the other
version, starting ``lead_ms`` of event time ahead of the newest event written: ahead of every
partition's horizon, so no router needs to pin it (a partition that does pin says so on the
status topic, and the checker uses its pin). Published as an operator would, through
``cutover.control.routes.publish_plan`` (the checks a router makes; retried while a broker is down).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cutover.control.routes import PlanNotPublished, Target, publish_plan
from cutover.plan import CutoverPlan, Segment, utcnow
from tests.soak.workload import VERSIONS


def first_plan(route: str) -> CutoverPlan:
    return CutoverPlan(route=route, epoch=1,
                       segments=(Segment(from_event_time=None, primary=VERSIONS[0]),),
                       issued_at=utcnow(), issued_by="soak")


def next_switch(plan: CutoverPlan, boundary: int) -> CutoverPlan:
    """The plan after ``plan``: the other version primary from ``boundary`` on."""
    current = plan.segments[-1].primary
    other = VERSIONS[1] if current == VERSIONS[0] else VERSIONS[0]
    return CutoverPlan(route=plan.route, epoch=plan.epoch + 1,
                       segments=(*plan.segments, Segment(from_event_time=boundary,
                                                         primary=other)),
                       issued_at=utcnow(), issued_by="soak")


class PlanSwitcher:
    """Publishes the first plan, then a switch every ``every_s`` seconds until stopped."""

    def __init__(self, target: Target, route: str, every_s: float, lead_ms: int,
                 newest_event_time: Callable[[], int | None]) -> None:
        self.target = target
        self.every_s = every_s
        self.lead_ms = lead_ms
        self.newest = newest_event_time
        self.published: list[CutoverPlan] = []
        self.plan = first_plan(route)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plans", daemon=True)

    def publish_first(self) -> None:
        self._publish(self.plan)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(120)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            ahead_of = self.newest() or int(time.time() * 1000)
            plan = next_switch(self.plan, ahead_of + self.lead_ms)
            try:
                self._publish(plan)
            except RuntimeError:  # in self.errors; the next switch tries again
                continue
            self.plan = plan

    def _publish(self, plan: CutoverPlan) -> None:
        for _ in range(10):
            try:
                self.published.append(publish_plan(self.target, plan))
                return
            except PlanNotPublished as exc:
                self.errors.append(f"epoch {plan.epoch}: {exc}")
                time.sleep(2)
        raise RuntimeError(f"plan epoch {plan.epoch} could not be published: {self.errors[-1]}")
