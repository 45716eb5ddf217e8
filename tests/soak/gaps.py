"""Gaps: how long a partition went without a record, input against output, after a fault.

The input's gap on a partition is the longest time between two acknowledgements of its data
(either version's: the larger of the two) in the fault's window; the output's, the longest time
between two records arriving at the checker. A partition still silent at the end of the window
counts the silence up to it. The window of a fault runs from its start to the start of the
next fault (or the end of the input).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


def largest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch within ``[start, end]`` touched by no time in ``times`` (sorted):
    between two consecutive times, from the last time before ``start``, or up to ``end``."""
    i = bisect.bisect_left(times, start)
    prev = times[i - 1] if i > 0 else start
    gap = 0.0
    for t in times[i:]:
        if t > end:
            break
        gap = max(gap, t - prev)
        prev = t
    return max(gap, end - prev)


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
                    start: float, end: float) -> PartitionGap:
    """The partition whose output gap exceeds its input gap the most in ``[start, end]``."""
    gaps = [PartitionGap(partition=p,
                         output_s=round(largest_gap(times, start, end), 2),
                         input_s=round(max(largest_gap(i[p], start, end) for i in inputs), 2))
            for p, times in sorted(output.items())]
    return max(gaps, key=lambda g: (g.excess_s, g.output_s))
