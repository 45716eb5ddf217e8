"""The targets of the partition-count benchmark (issue: production partition counts), each
checked against a measured figure: the figure, its ratio to the target and PASS or FAIL. A
figure that could not be measured (the worker never got there) fails its target."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FIRST_OUTPUT_S = 10.0        # first output after the worker starts
FAILOVER_SAME_ID_S = 10.0    # kill -9, restarted with the same instance id: every partition
FAILOVER_STANDBY_S = 12.0    # kill -9, a running second worker takes over: every partition
RATE_SHARE = 0.90            # rate at 64 partitions / rate at 4
MAX_THREADS = 100            # threads of a worker at 256 partitions
MAX_RSS_MB = 400.0           # peak RSS of a worker at 256 partitions
TARGET_SCALE = (64, 256)     # the partition counts the start-up and failover targets name
SIZE_AT = 256                # the partition count the threads and memory targets name


@dataclass(frozen=True)
class Row:
    """One partition count's figures (None: not measured, the step did not complete)."""

    partitions: int
    routes: int
    first_output_s: float | None
    every_partition_output_s: float | None
    rate_per_s: float | None          # raw data records/s, first output to last
    failover_same_id_s: float | None
    failover_standby_s: float | None
    threads: int | None
    rss_mb: float | None
    lost: int
    duplicated: int
    wrong_version: int


@dataclass(frozen=True)
class RateRound:
    """One round of the routing rate at the fewest and at the most partitions compared, each
    a fresh backlog routed by a fresh worker, one count after the other."""

    low_partitions: int
    high_partitions: int
    low_rate: float | None      # raw data records/s (None: the backlog was not routed)
    high_rate: float | None
    high_first: bool            # which count this round routed first
    # The pass-through loop's records/s over the same backlog, just before the worker (None:
    # not measured): what the client and the broker give at each count without routing.
    low_loop: float | None = None
    high_loop: float | None = None

    @property
    def share(self) -> float | None:
        """The rate at the most partitions / at the fewest."""
        return _share(self.low_rate, self.high_rate)

    @property
    def loop_share(self) -> float | None:
        """The pass-through loop's rate at the most partitions / at the fewest."""
        return _share(self.low_loop, self.high_loop)


def _share(low: float | None, high: float | None) -> float | None:
    return high / low if low and high is not None else None


def median_share(rounds: Sequence[RateRound], loop: bool = False) -> float | None:
    """The median of the rounds' shares (``loop``: the pass-through loop's); None when a
    round has none (a count not routed)."""
    shares = [r.loop_share if loop else r.share for r in rounds]
    if not shares or any(x is None for x in shares):
        return None
    return statistics.median(x for x in shares if x is not None)


@dataclass(frozen=True)
class Target:
    name: str
    figure: float | None
    unit: str
    kind: Literal["at most", "at least"]
    limit: float
    partitions: int        # the row (partition count) the figure is of
    field: str             # the row's figure the target checks

    @property
    def ratio(self) -> float | None:
        """figure / limit: at most 1 passes an upper limit, at least 1 a lower one (none for a
        limit of 0)."""
        return None if self.figure is None or not self.limit else self.figure / self.limit

    @property
    def passed(self) -> bool:
        if self.figure is None:
            return False
        return self.figure <= self.limit if self.kind == "at most" else self.figure >= self.limit

    def line(self) -> str:
        fig = "not measured" if self.figure is None else f"{self.figure:,.2f} {self.unit}"
        ratio = "" if self.ratio is None else f" = {self.ratio:.3f}x the target"
        return (f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {fig} (target "
                f"{self.kind} {self.limit:,.2f} {self.unit}){ratio}")


def _named(rows: Sequence[Row], wanted: Sequence[int]) -> list[Row]:
    """The rows of the counts a target names, or the largest measured when none is (a smoke
    run's counts are smaller)."""
    named = [r for r in rows if r.partitions in wanted]
    return named or [max(rows, key=lambda r: r.partitions)]


def compared(rows: Sequence[Row]) -> tuple[Row, Row]:
    """The rows whose rates the rate share compares: 4 and 64 partitions, or the fewest and
    the most run."""
    by_count = {r.partitions: r for r in rows}
    return (by_count.get(4) or min(rows, key=lambda r: r.partitions),
            by_count.get(64) or max(rows, key=lambda r: r.partitions))


def targets(rows: Sequence[Row], rate_rounds: Sequence[RateRound] = ()) -> list[Target]:
    """Each target of the issue against ``rows``; the rate share compares 64 partitions with
    4 (or the largest count run with the smallest): the median share of ``rate_rounds`` when
    there are any, else the share of the rows' own rates."""
    out: list[Target] = []
    for r in _named(rows, TARGET_SCALE):
        at = f"at {r.partitions} partitions"
        n = r.partitions
        out += [Target(f"first output after start, {at}", r.first_output_s, "s", "at most",
                       FIRST_OUTPUT_S, n, "first_output_s"),
                Target(f"failover, same instance id, every partition, {at}",
                       r.failover_same_id_s, "s", "at most", FAILOVER_SAME_ID_S, n,
                       "failover_same_id_s"),
                Target(f"failover, standby, every partition, {at}", r.failover_standby_s, "s",
                       "at most", FAILOVER_STANDBY_S, n, "failover_standby_s")]
    low, high = compared(rows)
    if rate_rounds:
        share = median_share(rate_rounds)
        of = f" (median of {len(rate_rounds)} rounds)"
    else:
        share = RateRound(low.partitions, high.partitions, low.rate_per_s, high.rate_per_s,
                          False).share
        of = ""
    if high is not low:   # a run of one count has no rate to compare with
        out.append(Target(f"routing rate at {high.partitions} / at {low.partitions} "
                          f"partitions{of}",
                          None if share is None else share * 100, "%", "at least",
                          RATE_SHARE * 100, high.partitions, "rate_per_s"))
    for r in _named(rows, (SIZE_AT,)):
        out += [Target(f"threads of the worker at {r.partitions} partitions",
                       None if r.threads is None else float(r.threads), "", "at most",
                       MAX_THREADS, r.partitions, "threads"),
                Target(f"peak RSS of the worker at {r.partitions} partitions", r.rss_mb, "MB",
                       "at most", MAX_RSS_MB, r.partitions, "rss_mb")]
    for r in rows:
        out.append(Target(f"lost + duplicated + wrong version at {r.partitions} partitions",
                          float(r.lost + r.duplicated + r.wrong_version), "", "at most", 0,
                          r.partitions, "lost"))
    return out
