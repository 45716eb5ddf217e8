"""The partition-count benchmark's targets and layout (tests/bench): what passes, what fails,
and which partition count each target is checked at."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.bench.partition_backlog import (
    data_records,
    events_for,
    layout_for,
    primary,
    switch_time,
)
from tests.bench.partition_targets import RateRound, Row, median_share, targets


def _row(partitions: int, **figures: Any) -> Row:
    """A worker within every target at ``partitions``, but for ``figures``."""
    within = Row(partitions=partitions, routes=max(1, partitions // 64), first_output_s=5.0,
                 every_partition_output_s=5.5, rate_per_s=10_000.0, failover_same_id_s=5.0,
                 failover_standby_s=9.0, threads=50, rss_mb=300.0, lost=0, duplicated=0,
                 wrong_version=0)
    return replace(within, **figures)


def test_256_partitions_are_four_routes_of_64_and_fewer_are_one_route() -> None:
    assert (layout_for(256, "t").routes, layout_for(256, "t").per_route) == (4, 64)
    assert (layout_for(64, "t").routes, layout_for(64, "t").per_route) == (1, 64)
    layout = layout_for(256, "t")
    assert {layout.place(i) for i in range(256)} == {(r, p) for r in range(4) for p in range(64)}


def test_the_backlog_has_at_least_the_raw_records_asked_for_and_no_more_events_than_needed(
) -> None:
    for raw in (20_000, 1_000_000):
        events = events_for(raw)
        assert data_records(events) >= raw > data_records(events - 1)


def test_the_plan_gives_blue_the_first_half_and_green_the_rest() -> None:
    boundary = switch_time(1000)
    assert primary(boundary - 1, boundary) == "blue"
    assert primary(boundary, boundary) == "green"


def test_the_start_up_and_failover_targets_are_checked_at_64_and_256() -> None:
    checked = targets([_row(4, first_output_s=30.0), _row(64), _row(256)])
    named = [t.name for t in checked if t.field == "first_output_s"]
    assert named == ["first output after start, at 64 partitions",
                     "first output after start, at 256 partitions"]
    assert all(t.passed for t in checked)


def test_a_smoke_run_checks_them_at_its_largest_count() -> None:
    checked = targets([_row(4), _row(16, failover_same_id_s=13.2)])
    same_id = [t for t in checked if t.field == "failover_same_id_s"]
    assert [(t.partitions, t.passed) for t in same_id] == [(16, False)]
    assert same_id[0].ratio is not None and round(same_id[0].ratio, 2) == 1.32


def test_a_rate_at_64_under_90_percent_of_the_rate_at_4_fails() -> None:
    checked = targets([_row(4, rate_per_s=20_000.0), _row(64, rate_per_s=17_000.0)])
    share = next(t for t in checked if t.field == "rate_per_s")
    assert (share.figure, share.passed) == (85.0, False)


def test_a_figure_that_was_not_measured_fails_its_target() -> None:
    checked = targets([_row(4), _row(64, failover_standby_s=None)])
    standby = next(t for t in checked if t.field == "failover_standby_s")
    assert not standby.passed and standby.ratio is None
    assert "FAIL" in standby.line() and "not measured" in standby.line()


def test_threads_and_memory_are_checked_at_256() -> None:
    checked = targets([_row(4), _row(64, rss_mb=900.0), _row(256, rss_mb=401.0)])
    rss = [t for t in checked if t.field == "rss_mb"]
    assert [(t.partitions, t.passed) for t in rss] == [(256, False)]


def test_a_run_of_one_count_has_no_rate_share() -> None:
    assert not [t for t in targets([_row(256)]) if t.field == "rate_per_s"]


def test_the_rate_share_is_the_median_of_its_rounds_not_one_pass() -> None:
    rows = [_row(4, rate_per_s=100_000.0), _row(64, rate_per_s=70_000.0)]
    rounds = [RateRound(4, 64, 100_000.0, 70_000.0, False),    # one slow pass: 70%
              RateRound(4, 64, 100_000.0, 98_000.0, True),
              RateRound(4, 64, 90_000.0, 99_000.0, False)]
    assert median_share(rounds) == 0.98
    share = [t for t in targets(rows, rounds) if t.field == "rate_per_s"]
    assert [(t.name, t.figure, t.passed) for t in share] == \
        [("routing rate at 64 / at 4 partitions (median of 3 rounds)", 98.0, True)]
    # without rounds the rows' own rates decide, and this pass fails
    assert [t.passed for t in targets(rows) if t.field == "rate_per_s"] == [False]


def test_a_round_that_routed_nothing_fails_the_rate_share() -> None:
    rounds = [RateRound(4, 64, 100_000.0, 98_000.0, False),
              RateRound(4, 64, 100_000.0, None, True)]
    assert median_share(rounds) is None
    share = [t for t in targets([_row(4), _row(64)], rounds) if t.field == "rate_per_s"]
    assert [(t.figure, t.passed) for t in share] == [(None, False)]
