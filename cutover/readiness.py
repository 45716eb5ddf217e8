"""Readiness: may the old version be torn down? A pure function of the plan and the
partitions' states, so that a worker, the CLI and the tests compute it the same way."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from cutover.plan import CutoverPlan
from cutover.status import Holdup, PartitionStatus, Transition, TransitionState


class PartitionProgress(BaseModel):
    """What readiness needs of one partition (a worker's state or a status message's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int | None
    boundary: int | None      # this partition's (maybe pinned) boundary of the transition
    watermarks: dict[str, int]
    held: int = 0
    paused: bool = False


def progress_of(ps: PartitionStatus, fallback_epoch: int | None = None) -> PartitionProgress:
    """Readiness input of a published partition status. ``fallback_epoch`` (the message's
    epoch) serves status messages written before partitions carried their own."""
    epoch = ps.epoch if ps.epoch is not None else fallback_epoch
    return PartitionProgress(epoch=epoch, boundary=ps.boundary, watermarks=ps.watermarks,
                             held=ps.held, paused=ps.paused)


def readiness(
    plan: CutoverPlan | None,
    partitions: Mapping[int, PartitionProgress],
    num_partitions: int,
    now: datetime,
) -> Transition:
    """The transition of the plan's last boundary and its state.

    CLEAR_TO_TEARDOWN needs, on every partition of the raw topic: the plan applied, the new
    version's and the old version's watermarks at or past the partition's boundary, and
    nothing held. Otherwise PENDING, or STALLED once the plan's deadline has passed; the
    holdups name each partition and the version (or the router) holding it back.

    While the plan's last segment has a canary the same conditions give HANDED_OVER, never
    CLEAR_TO_TEARDOWN: the keys that moved are handed over, but the old version is still the
    primary of every other key, so tearing it down would stall their records. ``share`` is
    then the canary's share of the keys.
    """
    if plan is None or plan.transition is None:
        return Transition(state=TransitionState.STEADY)
    old, new, boundary = plan.transition
    holdups: list[Holdup] = []
    for p in range(num_partitions):
        prog = partitions.get(p)
        if prog is None or prog.epoch is None or prog.epoch < plan.epoch:
            holdups.append(Holdup(partition=p, version=None, watermark=None, needed=boundary,
                                  why=f"no router has applied epoch {plan.epoch} here yet"))
            continue
        b = prog.boundary if prog.boundary is not None else boundary
        for version, role in ((new, "new"), (old, "old")):
            wm = prog.watermarks.get(version)
            if wm is None or wm < b:
                seen = "no watermark yet" if wm is None else f"watermark {wm}"
                holdups.append(Holdup(partition=p, version=version, watermark=wm, needed=b,
                                      why=f"{role} version {version!r} at {seen}, needs {b}"))
        if prog.paused:
            holdups.append(Holdup(partition=p, version=old, watermark=prog.watermarks.get(old),
                                  needed=b, why=f"paused: {prog.held} records held (max_held), "
                                  f"waiting for old version {old!r} to pass {b}; the rest is "
                                  "read again from the raw topic then"))
        elif prog.held:
            holdups.append(Holdup(partition=p, version=None, watermark=None, needed=b,
                                  why=f"router still holds {prog.held} records"))
    canary = plan.segments[-1].canary
    if not holdups:
        state = (TransitionState.CLEAR_TO_TEARDOWN if canary is None
                 else TransitionState.HANDED_OVER)
    elif plan.deadline is not None and now > plan.deadline:
        state = TransitionState.STALLED
    else:
        state = TransitionState.PENDING
    return Transition(**{"from": old}, to=new, boundary=boundary, state=state,
                      holdups=tuple(holdups),
                      share=canary.share if canary is not None else None)
