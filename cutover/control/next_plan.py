"""``cutover switch`` as a pure function: the next plan of a route, or a refusal that says why
and how to proceed.

A switch adds a segment giving event times from a boundary on to the target version. The
boundary must be ahead of every partition's horizon by a margin (a router pins a boundary it
has already passed to its horizon + 1 on that partition, so a boundary in the past still
routes every record exactly once, but later than asked), and the target version must be
running on every partition without lagging the leading version by more than ``max_lag``.
``force`` skips those checks.

A switch may instead give ``canary`` (a version and a share of the keys): the new segment keeps
the current primary and gives the canary's version the first share of the key buckets
(cutover.key_primary). The same checks apply to the canary's version; a canary that does not
grow, or that names another version than the one in force, is refused with the plan's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import ValidationError

from cutover.control.routes import RouteView
from cutover.key_primary import Canary
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
    return _next(view, target, None, at, margin, max_lag, force, now, deadline, issued_by)


def next_canary_plan(view: RouteView, canary: Canary, at: At, margin: int, max_lag: int,
                     force: bool, now: datetime, *, deadline: datetime | None = None,
                     issued_by: str = "") -> NextPlan:
    """The plan that gives ``canary.version`` the canary's share of the keys of
    ``view.route`` from the boundary ``at`` on, the current primary keeping the rest; raise
    :class:`SwitchRefused`."""
    if view.plan is None:
        raise SwitchRefused(f"route {view.route} has no plan yet, so no primary to run a canary "
                            f"beside; publish its first plan with `cutover plan init --route "
                            f"{view.route} --primary <running version>`")
    return _next(view, canary.version, canary, at, margin, max_lag, force, now, deadline,
                 issued_by)


def describe_rule(seg: Segment) -> str:
    if seg.canary is None:
        return seg.primary
    return f"{seg.primary} with canary {seg.canary.version} at {seg.canary.share:g}"


def _next(view: RouteView, target: str, canary: Canary | None, at: At, margin: int,
          max_lag: int, force: bool, now: datetime, deadline: datetime | None,
          issued_by: str) -> NextPlan:
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
        current = describe_rule(last)
        # with a canary in force, switching to the primary is the canary's rollback
        if canary is None and target == last.primary and last.canary is None and not force:
            raise SwitchRefused(f"{target!r} is already the primary of route {route} (epoch "
                                f"{view.plan.epoch}); nothing to switch")
        if canary is not None:
            _check_canary(view, last, canary)
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
        if canary is not None:
            kept.append(Segment(from_event_time=boundary, primary=kept[-1].primary,
                                canary=canary))
        elif kept[-1].primary != target or kept[-1].canary is not None:
            kept.append(Segment(from_event_time=boundary, primary=target))
        epoch = max(view.plan.epoch, view.control_epoch or 0) + 1
        plan = CutoverPlan(route=route, epoch=epoch, segments=tuple(kept), deadline=deadline,
                           issued_at=now, issued_by=issued_by)
    except ValidationError as exc:
        raise SwitchRefused(f"the plan would be invalid: {'; '.join(describe(exc))}") from None
    return NextPlan(plan, f"route {route}: {current} -> {describe_rule(plan.segments[-1])} at "
                          f"event time {boundary} (epoch {epoch})")


def _check_canary(view: RouteView, last: Segment, canary: Canary) -> None:
    """Refusals of a canary switch that the plan's own rule would word for a plan file."""
    route = view.route
    if canary.version == last.primary:
        raise SwitchRefused(f"{canary.version!r} is already the primary of route {route}; a "
                            "canary gives a share of the keys to the version that is not "
                            "primary yet (e.g. --canary green:5%)")
    held = last.canary
    if held is None:
        return
    if held.version != canary.version:
        raise SwitchRefused(f"route {route} has a canary of {held.version!r} in force; end it "
                            f"first with `--to {held.version}` (every key) or `--to "
                            f"{last.primary}` (the rollback), then start {canary.version!r}'s")
    if canary.buckets == held.buckets:
        raise SwitchRefused(f"{canary.version!r} already has {held.share:.2%} of the keys of "
                            f"route {route}; nothing to switch: give a larger share, or `--to "
                            f"{canary.version}` for every key")
    if canary.buckets < held.buckets:
        raise SwitchRefused(f"{canary.version!r} has {held.share:.2%} of the keys of route "
                            f"{route} and shares only grow; give {held.share:.2%} or more, or "
                            f"roll the canary back with `--to {last.primary}`")


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
