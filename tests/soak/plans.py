"""The plans of the soak: the route switches back and forth between the two versions, or goes
through a given list of steps (a per-key canary's rollout: a share, a wider share, then every
key, or a rollback).

Every switch is a new epoch whose timeline is the previous one plus a segment (the other
version, or the next step's segment form), starting ``lead_ms`` of event time ahead of the
newest event written: ahead of every partition's horizon, so no router needs to pin it (a
partition that does pin says so on the status topic, and the checker uses its pin). Published
as an operator would, through ``cutover.control.routes.publish_plan`` (the checks a router
makes; retried while a broker is down).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from cutover.control.routes import PlanNotPublished, Target, publish_plan
from cutover.headers import VersionId
from cutover.key_primary import Canary
from cutover.plan import CutoverPlan, Segment, utcnow
from tests.soak.workload import VERSIONS


class Step(BaseModel):
    """A segment's form without its start: the primary, and a canary when it has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    primary: VersionId
    canary: Canary | None = None

    def describe(self) -> str:
        if self.canary is None:
            return f"{self.primary} whole"
        return f"{self.primary} + {self.canary.version} {self.canary.share * 100:g}%"


def canary_steps(*forms: str) -> tuple[Step, ...]:
    """Steps from short forms on top of the first plan's primary: ``green:5%`` (a canary of
    ``green`` at 5% of the keys on the current primary) or ``green`` (``green`` primary for every
    key: the full switch, or a rollback when it is the current primary)."""
    primary = VERSIONS[0]
    out: list[Step] = []
    for form in forms:
        version, _, share = form.partition(":")
        if share:
            pct = share.removesuffix("%")
            out.append(Step(primary=primary,
                            canary=Canary(version=version, share=round(float(pct) * 100) / 10_000)))
        else:
            primary = version
            out.append(Step(primary=version))
    return tuple(out)


def first_plan(route: str) -> CutoverPlan:
    return CutoverPlan(route=route, epoch=1,
                       segments=(Segment(from_event_time=None, primary=VERSIONS[0]),),
                       issued_at=utcnow(), issued_by="soak")


def next_switch(plan: CutoverPlan, boundary: int, step: Step | None = None) -> CutoverPlan:
    """The plan after ``plan``: from ``boundary`` on, ``step``'s segment, or (None) the other
    version primary for every key."""
    if step is None:
        current = plan.segments[-1].primary
        step = Step(primary=VERSIONS[1] if current == VERSIONS[0] else VERSIONS[0])
    seg = Segment(from_event_time=boundary, primary=step.primary, canary=step.canary)
    return CutoverPlan(route=plan.route, epoch=plan.epoch + 1, segments=(*plan.segments, seg),
                       issued_at=utcnow(), issued_by="soak")


class PlanSwitcher:
    """Publishes the first plan, then a switch every ``every_s`` seconds until stopped: to the
    other version, or (``steps`` given) to each step in turn, and no more after the last."""

    def __init__(self, target: Target, route: str, every_s: float, lead_ms: int,
                 newest_event_time: Callable[[], int | None],
                 steps: tuple[Step, ...] | None = None) -> None:
        self.target = target
        self.every_s = every_s
        self.lead_ms = lead_ms
        self.newest = newest_event_time
        self.steps = steps
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

    @property
    def last_step_published(self) -> bool:
        """Every step is published (never, without ``steps``: the switches go on)."""
        return self.steps is not None and self.plan.epoch == 1 + len(self.steps)

    def _run(self) -> None:
        while not self.last_step_published and not self._stop.wait(self.every_s):
            ahead_of = self.newest() or int(time.time() * 1000)
            step = None if self.steps is None else self.steps[self.plan.epoch - 1]
            plan = next_switch(self.plan, ahead_of + self.lead_ms, step)
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
