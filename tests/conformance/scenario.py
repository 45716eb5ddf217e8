"""The conformance grid's dimensions, the covering design over them and the CI subset.

The full product of the dimensions is too large to run, so the grid is an all-pairs covering
design: every pair of values of two different dimensions appears in at least one cell. It is
built greedily in a fixed order, so the same code always gives the same grid (the seed only
drives the data inside each cell).
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator


class Failure(StrEnum):
    """What goes wrong during a cell, and when (relative to the switch)."""

    NONE = "none"
    ROUTER_KILL_BEFORE = "router_kill9_before"      # worker kill -9 before the switch
    ROUTER_KILL_DURING = "router_kill9_during"      # ... while the handover is pending
    ROUTER_KILL_AFTER = "router_kill9_after"        # ... after CLEAR_TO_TEARDOWN
    OLD_JOB_REPLAY = "old_job_kill9_replay"         # old job dies mid-batch, replays batches
    NEW_JOB_REPLAY = "new_job_kill9_replay"         # new job dies mid-batch, replays batches
    WORKER_JOIN_LEAVE = "worker_join_leave"         # a second worker joins, then leaves
    LATE_PLAN = "late_plan"                         # the switch arrives below the horizon
    BROKER_KILL = "broker_kill9"                    # kill -9 of a partition leader mid-switch
    # A worker freezes (SIGSTOP) after producing a batch, before committing it; its partitions
    # move to a second worker, which catches up; then the frozen one resumes (SIGCONT).
    ZOMBIE = "router_zombie"
    # The old job stops writing right after the switch while the new one leads for
    # STALL_BATCHES batches, far more than the route's max_held per partition (ordered
    # handover pauses the partitions), then comes back and catches up.
    OLD_STALL = "old_job_stall_past_max_held"


class Scenario(BaseModel):
    """One cell of the grid: a value for every dimension, plus the data seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sources: Literal[1, 2]
    divergence: Literal["none", "large"]
    idle: Literal["none", "some"]
    failure: Failure
    identity: Literal["record", "key_event_time"]
    handover: Literal["ordered", "immediate"]
    # What the job emits in a micro-batch: "stateless" records at or above the batch's
    # watermark (a map/filter/enrich job); "windowed" the records the batch's watermark closes,
    # all below it (an append-mode windowed aggregation).
    shape: Literal["stateless", "windowed"] = "stateless"
    seed: int = 0

    @model_validator(mode="after")
    def _divergence_needs_two_sources(self) -> Scenario:
        # Divergence is between the watermarks of two sources: with one there is none.
        if self.sources == 1 and self.divergence == "large":
            raise ValueError("watermark divergence needs two sources")
        return self

    @property
    def id(self) -> str:
        return (f"src{self.sources}-div_{self.divergence}-idle_{self.idle}-{self.failure.value}"
                f"-{self.identity}-{self.handover}-{self.shape}")


DIMENSIONS: dict[str, tuple[object, ...]] = {
    "failure": tuple(Failure),
    "sources": (1, 2),
    "divergence": ("none", "large"),
    "idle": ("none", "some"),
    "identity": ("record", "key_event_time"),
    "handover": ("ordered", "immediate"),
    "shape": ("stateless", "windowed"),
}


def _valid(values: dict[str, object]) -> bool:
    return not (values["sources"] == 1 and values["divergence"] == "large")


def _pairs(values: dict[str, object]) -> set[tuple[str, object, str, object]]:
    names = list(DIMENSIONS)
    return {(a, values[a], b, values[b]) for a, b in itertools.combinations(names, 2)}


def required_pairs() -> set[tuple[str, object, str, object]]:
    """Every pair of values of two dimensions that some valid cell can hold."""
    out: set[tuple[str, object, str, object]] = set()
    for combo in itertools.product(*DIMENSIONS.values()):
        values = dict(zip(DIMENSIONS, combo, strict=True))
        if _valid(values):
            out |= _pairs(values)
    return out


def full_grid(seed: int) -> list[Scenario]:
    """A deterministic all-pairs covering design (greedy: take the candidate cell covering the
    most uncovered pairs, first in product order on ties)."""
    candidates = [dict(zip(DIMENSIONS, combo, strict=True))
                  for combo in itertools.product(*DIMENSIONS.values())]
    candidates = [c for c in candidates if _valid(c)]
    uncovered = required_pairs()
    cells: list[dict[str, object]] = []
    while uncovered:
        best = max(candidates, key=lambda c: len(_pairs(c) & uncovered))
        cells.append(best)
        uncovered -= _pairs(best)
    return [Scenario.model_validate({**c, "seed": seed + i}) for i, c in enumerate(cells)]


def ci_subset(grid: list[Scenario]) -> list[Scenario]:
    """Cells of the grid such that every value of every dimension appears at least once: one
    cell per failure (so every kill -9 row is in), chosen to cover the other values first."""
    missing = {(d, v) for d, vs in DIMENSIONS.items() for v in vs}
    chosen: list[Scenario] = []
    for failure in Failure:
        rows = [s for s in grid if s.failure is failure]
        best = max(rows, key=lambda s: len(_values(s) & missing))
        chosen.append(best)
        missing -= _values(best)
    assert not missing, f"the CI subset misses {sorted(map(str, missing))}"
    return chosen


def _values(s: Scenario) -> set[tuple[str, object]]:
    return {(d, getattr(s, d)) for d in DIMENSIONS}


def is_covering(grid: list[Scenario]) -> bool:
    have: set[tuple[str, object, str, object]] = set()
    for s in grid:
        have |= _pairs({d: getattr(s, d) for d in DIMENSIONS})
    return required_pairs() <= have
