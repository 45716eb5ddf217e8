"""What the soak measures: gaps in a fault's window, and whether worker memory stayed flat."""

from __future__ import annotations

from pathlib import Path

from tests.soak.gaps import largest_gap, worst_partition
from tests.soak.router_workers import RssSample, Worker
from tests.soak.rss import rss_flat, rss_summary


def test_a_fault_owns_the_silences_that_begin_in_its_window() -> None:
    times = [0.0, 1.0, 2.0, 9.0, 10.0, 30.0, 31.0, 32.0]
    # Window 15 s -> 40 s: silences beginning at 5 s or later, up to 30 s.
    assert largest_gap(times, 15.0, 40.0, until=50.0) == 20.0   # 10 -> 30
    assert largest_gap(times, 12.0, 15.0, until=50.0) == 7.0    # 2 -> 9 began at 2 s
    assert largest_gap(times, 40.0, 60.0, until=50.0) == 18.0   # 32 -> the end, nothing since


def test_a_route_that_stopped_is_charged_to_the_fault_that_stopped_it() -> None:
    times = [0.0, 1.0, 20.0, 200.0, 201.0]
    assert largest_gap(times, 15.0, 100.0, until=300.0) == 180.0  # the first fault: 20 -> 200
    assert largest_gap(times, 100.0, 180.0, until=300.0) == 0.0   # still silent: not its own
    assert largest_gap([], 15.0, 100.0, until=300.0) == 295.0     # never a record at all


def test_the_worst_partition_is_the_one_whose_output_lags_its_input_most() -> None:
    output = {0: [0.0, 20.0, 21.0], 1: [0.0, 16.0, 21.0]}
    blue = {0: [0.0, 18.0, 21.0], 1: [0.0, 3.0, 16.0, 21.0]}
    green = {0: [0.0, 1.0, 21.0], 1: [0.0, 1.0, 16.0, 21.0]}
    g = worst_partition(output, [blue, green], 10.0, 21.0, 21.0)
    assert (g.partition, g.output_s, g.input_s) == (1, 16.0, 15.0)  # green's 15 s on p1
    g = worst_partition(output, [blue], 10.0, 21.0, 21.0)
    assert (g.partition, g.excess_s) == (1, 3.0)


def _worker(samples: list[tuple[float, int, float]]) -> Worker:
    w = Worker("w1", Path("c"), Path("s"), Path("l"), 0)
    w.rss = [RssSample(at, pid, mb) for at, pid, mb in samples]
    return w


def test_memory_is_judged_from_after_the_first_fault_to_the_end() -> None:
    flat = _worker([(0, 1, 100.0), (100, 1, 200.0), (700, 1, 220.0)])
    rows = rss_summary([flat], first_fault_end=90, min_span_s=300)
    assert [(r.start_mb, r.reference_mb, r.end_mb, r.judged, r.flat) for r in rows] == \
        [(100.0, 200.0, 220.0, True, True)]
    growing = _worker([(0, 1, 100.0), (100, 1, 200.0), (700, 1, 240.0)])
    assert rss_flat(rss_summary([growing], 90, 300)) is False


def test_a_process_restarted_late_is_listed_but_not_judged() -> None:
    w = _worker([(0, 1, 100.0), (100, 1, 200.0), (700, 2, 50.0), (800, 2, 90.0)])
    rows = rss_summary([w], 90, 300)
    assert [(r.pid, r.judged) for r in rows] == [(1, False), (2, False)]
    assert rss_flat(rows) is None


def test_the_end_is_memory_held_not_a_recovery_s_passing_peak() -> None:
    # a worker that rebuilt its stores just before it ended: its last sample spikes
    spike = _worker([(0, 1, 100.0), (100, 1, 200.0), (650, 1, 205.0), (700, 1, 260.0)])
    rows = rss_summary([spike], 90, 300)
    assert [(r.end_mb, r.last_mb, r.flat) for r in rows] == [(205.0, 260.0, True)]
    # growth that lasts the whole window is growth
    held = _worker([(0, 1, 100.0), (100, 1, 200.0), (650, 1, 240.0), (700, 1, 260.0)])
    assert rss_flat(rss_summary([held], 90, 300)) is False


def test_memory_is_judged_once_the_stores_hold_a_whole_retention_window() -> None:
    # the stores fill for the first 300 s of the run (its retention), then hold
    filling = _worker([(0, 1, 100.0), (100, 1, 105.0), (300, 1, 130.0), (900, 1, 132.0)])
    rows = rss_summary([filling], first_fault_end=90, min_span_s=300, window_full_at=300)
    assert [(r.reference_mb, r.end_mb, r.flat) for r in rows] == [(130.0, 132.0, True)]
    # judged from after the first fault only, the filling would read as growth
    assert rss_flat(rss_summary([filling], 90, 300)) is False


def test_memory_is_judged_from_a_minute_after_the_process_last_took_partitions_over() -> None:
    # it starts with 2 partitions, takes 4 more over at 400 s and forms their working set
    w = Worker("w1", Path("c"), Path("s"), Path("l"), 0)
    w.rss = [RssSample(0, 1, 100.0, partitions=0), RssSample(100, 1, 104.0, partitions=2),
             RssSample(400, 1, 106.0, partitions=6), RssSample(460, 1, 118.0, partitions=6),
             RssSample(900, 1, 120.0, partitions=6)]
    rows = rss_summary([w], first_fault_end=90, min_span_s=300)
    assert [(r.reference_mb, r.reference_partitions, r.flat) for r in rows] == \
        [(118.0, 6, True)]
    # memory that keeps growing after the takeover's minute is still growth
    w.rss[-1] = RssSample(900, 1, 140.0, partitions=6)
    assert rss_flat(rss_summary([w], 90, 300)) is False
    # losing partitions is no takeover: the reference stays where it was
    w.rss[-1] = RssSample(900, 1, 120.0, partitions=3)
    assert [r.reference_mb for r in rss_summary([w], 90, 300)] == [118.0]
