"""``cutover wait`` with a per-key canary: it never says the old version may be torn down while
that version is still the primary of any key."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import pytest

from cutover.cli.status import _wait_loop
from cutover.control.routes import PartitionReport, RouteView
from cutover.plan import CutoverPlan
from cutover.status import PartitionStatus, TransitionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def route(*segments: dict[str, object]) -> RouteView:
    """Route r on two partitions where both versions passed every boundary."""
    plan = CutoverPlan(route="r", epoch=3, segments=[
        {"from_event_time": None, "primary": "blue"}, *segments])
    v = RouteView("r", plan=plan, num_partitions=2)
    for p in range(2):
        status = PartitionStatus(epoch=3, boundary=plan.boundaries[-1], horizon=500,
                                 watermarks={"blue": 500, "green": 500})
        v.partitions[p] = PartitionReport(status, 3, "w1", NOW)
    return v


CANARY = {"from_event_time": 100, "primary": "blue",
          "canary": {"version": "green", "share": 0.05}}


class OneView:
    def __init__(self, v: RouteView) -> None:
        self.v = v

    def refresh(self) -> dict[str, RouteView]:
        return {"r": self.v}


def wait(v: RouteView, for_: str = "clear-to-teardown") -> int:
    args = argparse.Namespace(route="r", json=False, timeout="1s", interval=0.01, for_=for_)
    want = (TransitionState.HANDED_OVER if for_ == "handed-over"
            else TransitionState.CLEAR_TO_TEARDOWN)
    return _wait_loop(args, OneView(v), want, time.monotonic() + 1)  # type: ignore[arg-type]


def test_wait_does_not_clear_the_old_version_while_its_canary_is_handed_over(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert wait(route(CANARY)) == 6
    err = capsys.readouterr().err
    assert "HANDED_OVER" in err and "5.00% of the keys" in err
    assert "'blue' is still the primary of every other key and must keep running" in err
    assert "cutover switch --route r --to green" in err


def test_wait_for_handed_over_exits_zero_once_the_canary_has_its_keys() -> None:
    assert wait(route(CANARY), for_="handed-over") == 0


def test_wait_clears_the_old_version_once_the_canary_ends_in_the_full_switch(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert wait(route(CANARY, {"from_event_time": 200, "primary": "green"})) == 0
    assert "CLEAR_TO_TEARDOWN — 'blue' may be torn down" in capsys.readouterr().out


def test_wait_clears_the_canary_version_once_the_canary_is_rolled_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert wait(route(CANARY, {"from_event_time": 200, "primary": "blue"})) == 0
    assert "CLEAR_TO_TEARDOWN — 'green' may be torn down" in capsys.readouterr().out
