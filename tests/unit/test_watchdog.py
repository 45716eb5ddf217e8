"""The progress watchdog (router.worker.watchdog) and the rebuild budget (router.worker.rebuilds): a
worker that owns input and decides nothing is reported and recovered, and one that cannot recover
leaves with a sentence instead of staying alive and idle."""

from __future__ import annotations

import threading

import pytest

from router.worker.rebuilds import MAX_DELAY_S, RebuildBudget, RebuildsExhausted
from router.worker.watchdog import EXIT_AFTER_STALLS, EXIT_STALLED, Progress, Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_step_that_decided_records_keeps_the_worker_healthy() -> None:
    clock = Clock()
    p = Progress(30.0, clock=clock)
    for _ in range(10):
        p.begin_step()
        clock.now += 10
        p.stepped(progressed=True)
    assert not p.check_due() and not p.stalled


def test_no_progress_for_stall_after_s_makes_the_stall_check_due() -> None:
    clock = Clock()
    p = Progress(30.0, clock=clock)
    p.begin_step()
    clock.now += 29
    p.stepped(progressed=False)
    assert not p.check_due()
    clock.now += 1
    assert p.check_due()


def test_an_idle_worker_is_not_stalled() -> None:
    clock = Clock()
    p = Progress(30.0, clock=clock)
    clock.now += 31
    assert p.check_due()
    p.idle()  # nothing waiting on its partitions
    assert not p.check_due() and not p.stalled


def test_a_stall_is_reported_until_progress_and_counted_once() -> None:
    clock = Clock()
    p = Progress(30.0, clock=clock)
    p.stall("no record decided for 30s while input waits on t:0")
    p.stall("no record decided for 30s while input waits on t:0")
    assert p.stalled and p.stalls == 1
    assert "cutover_worker_stalled 1" in p.prometheus()
    assert p.as_json()["reason"] == "no record decided for 30s while input waits on t:0"
    p.stepped(progressed=True)
    assert not p.stalled and "cutover_worker_stalled 0" in p.prometheus()
    assert "cutover_worker_stalls_total 1" in p.prometheus()


def test_a_rebuild_restarts_the_stall_clock() -> None:
    clock = Clock()
    p = Progress(30.0, clock=clock)
    clock.now += 40
    p.rebuilt()
    assert not p.check_due() and p.rebuilds == 1


def test_a_blocked_step_is_reported_then_ends_the_process() -> None:
    clock = Clock()
    p = Progress(10.0, clock=clock)
    p.begin_step()
    clock.now += 9
    assert not p.look() and not p.stalled
    clock.now += 1
    assert not p.look() and p.stalled and "has not returned for 10s" in p.reason
    clock.now += 10 * (EXIT_AFTER_STALLS - 1)
    assert p.look()


def test_the_watchdog_thread_exits_the_process_of_a_blocked_worker() -> None:
    clock = Clock()
    p = Progress(1.0, clock=clock)
    p.begin_step()
    clock.now += 1.0 * EXIT_AFTER_STALLS
    codes: list[int] = []
    stop = threading.Event()
    dog = Watchdog(p, stop, exit_process=codes.append)
    dog.start()
    dog.thread.join(5)
    stop.set()
    assert codes == [EXIT_STALLED]


def test_the_watchdog_leaves_a_progressing_worker_alone() -> None:
    p = Progress(30.0)
    codes: list[int] = []
    stop = threading.Event()
    dog = Watchdog(p, stop, exit_process=codes.append)
    dog.start()
    stop.wait(1.5)
    stop.set()
    dog.thread.join(5)
    assert codes == [] and not p.stalled


def test_rebuilds_back_off_and_give_up_after_max_in_row() -> None:
    budget = RebuildBudget(max_in_row=4)
    delays = [budget.spend("consumer fenced") for _ in range(4)]
    assert delays[0] == 0.0
    assert delays[1:] == sorted(delays[1:]) and all(0 < d <= MAX_DELAY_S for d in delays[1:])
    with pytest.raises(RebuildsExhausted, match=r"4 client rebuilds in a row .*consumer fenced"):
        budget.spend("consumer fenced")


def test_progress_between_rebuilds_renews_the_budget() -> None:
    budget = RebuildBudget(max_in_row=2)
    for _ in range(10):
        budget.spend("x")
        budget.spend("x")
        budget.progressed()
    assert budget.in_row == 0
