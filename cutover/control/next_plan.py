"""``cutover switch`` as a pure function: the next plan of a route, or a refusal that says why
and how to proceed.

A switch adds a segment giving event times from a boundary on to the target version. The
boundary must be ahead of every partition's horizon by a margin (a router pins a boundary it
has already passed to its horizon + 1 on that partition, so a boundary in the past still
routes every record exactly once, but later than asked), and the target version must be
running on every partition without lagging the leading version by more than ``max_lag``.
``force`` skips those checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import ValidationError

from cutover.control.routes import RouteView
from cutover.plan import CutoverPlan, Segment
from cutover.validation import describe


class SwitchRefused(ValueError):
    """The switch is not safe (or not needed); the message says why and what to do."""


@dataclass(frozen=True)
class At:
    """Where the boundary goes: ``auto`` (the margin past the newest horizon or watermark of
    any partition), ``ahead`` (``ms`` past it), or an ``instant`` (event time ``ms``)."""

    kind: Literal["auto", "ahead", "instant"]
    ms: int = 0


class NextPlan(NamedTuple):
    plan: CutoverPlan
    summary: str   # what the plan does, in one line


def next_plan(view: RouteView, target: str, at: At, margin: int, max_lag: int, force: bool,
              now: datetime, *, deadline: datetime | None = None,
              issued_by: str = "") -> NextPlan:
    """The plan that makes ``target`` primary of ``view.route`` from the boundary ``at`` on
    (the route's first plan when it has none); raise :class:`SwitchRefused`."""
    route = view.route
    try:
        if view.plan is None:
            epoch = (view.control_epoch or 0) + 1
            plan = CutoverPlan(route=route, epoch=epoch,
                               segments=(Segment(from_event_time=None, primary=target),),
                               deadline=deadline, issued_at=now, issued_by=issued_by)
            return NextPlan(plan, f"first plan for route {route}: {target} is primary for all "
                                  "event times")
        last = view.plan.segments[-1]
        current = last.primary if last.canary is None else \
            f"{last.primary} with canary {last.canary.version} at {last.canary.share:g}"
        # with a canary in force, switching to the primary is the canary's rollback
        if target == last.primary and last.canary is None and not force:
            raise SwitchRefused(f"{target!r} is already the primary of route {route} (epoch "
                                f"{view.plan.epoch}); nothing to switch")
        n = view.num_partitions or 0
        missing = [p for p in range(n) if p not in view.partitions]
        if (not view.partitions or missing) and not force:
            raise SwitchRefused(f"no router status for partitions {missing or 'any'} of route "
                                f"{route}; start the router (or wait for its first status) "
                                "and retry, or pass --force")
        boundary = _boundary(view, at, margin)
        if not force:
            _check_safe(view, target, boundary, margin, max_lag)
        kept = [s for s in view.plan.segments if s.from_event_time is None
                or s.from_event_time < boundary]
        if kept[-1].primary != target or kept[-1].canary is not None:
            kept.append(Segment(from_event_time=boundary, primary=target))
        epoch = max(view.plan.epoch, view.control_epoch or 0) + 1
        plan = CutoverPlan(route=route, epoch=epoch, segments=tuple(kept), deadline=deadline,
                           issued_at=now, issued_by=issued_by)
    except ValidationError as exc:
        raise SwitchRefused(f"the plan would be invalid: {'; '.join(describe(exc))}") from None
    return NextPlan(plan, f"route {route}: {current} -> {target} at event time {boundary} "
                          f"(epoch {epoch})")


def _boundary(view: RouteView, at: At, margin: int) -> int:
    if at.kind == "instant":
        return at.ms
    base = max(x for x in (view.max_horizon(), view.max_watermark(), 0) if x is not None)
    return base + (margin if at.kind == "auto" else at.ms)


def _check_safe(view: RouteView, target: str, boundary: int, margin: int,
                max_lag: int) -> None:
    for p, (ps, *_rest) in sorted(view.partitions.items()):
        if ps.horizon is not None and boundary < ps.horizon + margin:
            raise SwitchRefused(
                f"boundary {boundary} is not ahead of partition {p}'s horizon {ps.horizon} by "
                f"the margin {margin} ms; use --at auto, --at {ps.horizon + margin} or later, "
                "or --force to let the router pin it")
    for p, (ps, *_rest) in sorted(view.partitions.items()):
        wm = ps.watermarks.get(target)
        lead = max(ps.watermarks.values(), default=None)
        if wm is None:
            raise SwitchRefused(f"version {target!r} has no watermark on partition {p}: is it "
                                "running and tagged? Start it and wait for its heartbeats, or "
                                "--force")
        if lead is not None and lead - wm > max_lag:
            raise SwitchRefused(f"version {target!r} lags on partition {p}: watermark {wm}, "
                                f"{lead - wm} ms behind (limit {max_lag} ms); wait for it to "
                                "catch up, raise --max-lag, or --force")
