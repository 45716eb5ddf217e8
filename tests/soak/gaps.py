"""Gaps: how long a partition went without a record, input against output, after a fault.

A gap is a silence between two consecutive records of a partition: for the input, between two
acknowledgements of its data by the broker (each version's; the larger of the two counts); for
the output, between two records arriving at the checker (``read_committed``). A fault owns the
silences that begin in its window: from ``LEAD_S`` before its start (the last record before a
fault may come a moment before it) to ``LEAD_S`` before the next fault's start (or the end of
the input). A silence runs until the partition's next record, however late, or to the end of
the observation when none came: a route that stopped is charged to the fault that stopped it,
never to the faults that come after.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

LEAD_S = 10.0


def largest_gap(times: Sequence[float], start: float, end: float, until: float) -> float:
    """The longest silence in ``times`` (sorted) that begins in ``[start - LEAD_S,
    end - LEAD_S)``, measured to the next time or, for the last one, to ``until``; with no
    time at all, the whole stretch from ``start - LEAD_S`` to ``until``."""
    lo, hi = start - LEAD_S, end - LEAD_S
    if not times:
        return max(0.0, until - lo)
    gap = 0.0
    for j in range(bisect.bisect_left(times, lo), len(times)):
        if times[j] >= hi:
            break
        nxt = times[j + 1] if j + 1 < len(times) else until
        gap = max(gap, nxt - times[j])
    return gap


class PartitionGap(BaseModel):
    """The worst partition of one fault's window: its output and input gaps, in seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int
    output_s: float
    input_s: float

    @property
    def excess_s(self) -> float:
        return self.output_s - self.input_s


def worst_partition(output: dict[int, list[float]], inputs: Sequence[dict[int, list[float]]],
                    start: float, end: float, until: float) -> PartitionGap:
    """The partition whose output gap exceeds its input gap the most in the window."""
    gaps = [PartitionGap(partition=p,
                         output_s=round(largest_gap(times, start, end, until), 2),
                         input_s=round(max(largest_gap(i[p], start, end, until)
                                           for i in inputs), 2))
            for p, times in sorted(output.items())]
    return max(gaps, key=lambda g: (g.excess_s, g.output_s))
