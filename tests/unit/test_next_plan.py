"""``cutover switch``'s rules (cutover.control.next_plan): the plan it publishes, and every
refusal."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rule_support import make_plan

from cutover.control.next_plan import At, NextPlan, SwitchRefused, next_plan
from cutover.control.routes import PartitionReport, RouteView
from cutover.plan import CutoverPlan
from cutover.status import PartitionStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MARGIN, MAX_LAG = 10_000, 60_000
AUTO = At("auto")


def view(*parts: tuple[int | None, dict[str, int]], plan_epoch: int | None = 1,
         control_epoch: int | None = None, num_partitions: int | None = None) -> RouteView:
    """A route with blue primary (plan ``plan_epoch``) and partitions (horizon, watermarks)."""
    plan = make_plan(plan_epoch, (None, "blue")) if plan_epoch is not None else None
    v = RouteView("r", plan=plan, control_epoch=control_epoch,
                  num_partitions=num_partitions if num_partitions is not None else len(parts))
    for p, (horizon, wms) in enumerate(parts):
        v.partitions[p] = PartitionReport(PartitionStatus(horizon=horizon, watermarks=wms),
                                          plan_epoch, "w1", NOW)
    return v


CAUGHT_UP = {"blue": 5_000, "green": 4_000}


def switch(v: RouteView, to: str = "green", at: At = AUTO, force: bool = False) -> NextPlan:
    return next_plan(v, to, at, MARGIN, MAX_LAG, force, NOW, issued_by="ops@host")


# -- plans ---------------------------------------------------------------------------------------

def test_a_route_without_a_plan_gets_its_first_plan_with_one_primary() -> None:
    plan, summary = switch(view(plan_epoch=None, control_epoch=4), to="blue")
    assert plan.epoch == 5 and [s.primary for s in plan.segments] == ["blue"]
    assert plan.issued_at == NOW and plan.issued_by == "ops@host"
    assert summary == "first plan for route r: blue is primary for all event times"


def test_auto_puts_the_boundary_a_margin_past_the_newest_horizon_or_watermark() -> None:
    plan, summary = switch(view((7_000, CAUGHT_UP), (6_000, CAUGHT_UP)))
    assert plan.transition == ("blue", "green", 17_000)
    assert plan.epoch == 2
    assert summary == "route r: blue -> green at event time 17000 (epoch 2)"
    plan, _ = switch(view((1_000, CAUGHT_UP)))   # a watermark ahead of every horizon
    assert plan.transition == ("blue", "green", 15_000)


def test_ahead_and_instant_boundaries() -> None:
    v = view((7_000, CAUGHT_UP))
    assert switch(v, at=At("ahead", 60_000)).plan.transition == ("blue", "green", 67_000)
    assert switch(v, at=At("instant", 20_000)).plan.transition == ("blue", "green", 20_000)


def test_the_epoch_passes_any_epoch_seen_on_the_control_topic() -> None:
    plan, _ = switch(view((7_000, CAUGHT_UP), control_epoch=9))
    assert plan.epoch == 10


def test_a_rollback_drops_the_segments_from_the_new_boundary_on() -> None:
    v = view((30_000, {"blue": 30_000, "green": 30_000}))
    v.plan = make_plan(2, (None, "blue"), (20_000, "green"))
    plan, _ = switch(v, to="blue")
    assert [(s.from_event_time, s.primary) for s in plan.segments] == [
        (None, "blue"), (20_000, "green"), (40_000, "blue")]
    v.plan = make_plan(2, (None, "blue"), (50_000, "green"))   # not yet reached: cancelled
    plan, _ = switch(v, to="blue")
    assert [(s.from_event_time, s.primary) for s in plan.segments] == [(None, "blue")]


def test_force_skips_every_check() -> None:
    v = view((7_000, {"blue": 100_000}), (None, {}), num_partitions=3)
    plan, _ = switch(v, at=At("instant", 1_000), force=True)
    assert plan.transition == ("blue", "green", 1_000)
    again, _ = switch(view(), to="blue", force=True)   # already primary: a new epoch only
    assert again.epoch == 2 and [s.primary for s in again.segments] == ["blue"]


# -- refusals ------------------------------------------------------------------------------------

def test_refuses_to_switch_to_the_version_already_primary() -> None:
    with pytest.raises(SwitchRefused, match="'blue' is already the primary of route r "
                                            r"\(epoch 1\); nothing to switch"):
        switch(view((7_000, CAUGHT_UP)), to="blue")


def test_refuses_without_router_status_for_every_partition() -> None:
    with pytest.raises(SwitchRefused, match=r"no router status for partitions \[1, 2\] .*"
                                            "--force"):
        switch(view((7_000, CAUGHT_UP), num_partitions=3))
    with pytest.raises(SwitchRefused, match="no router status for partitions any of route r"):
        switch(view(num_partitions=0))


def test_refuses_a_boundary_not_ahead_of_a_horizon_by_the_margin() -> None:
    with pytest.raises(SwitchRefused, match="boundary 15000 is not ahead of partition 1's "
                                            "horizon 7000 by the margin 10000 ms; use --at "
                                            "auto, --at 17000 or later"):
        switch(view((1_000, CAUGHT_UP), (7_000, CAUGHT_UP)), at=At("instant", 15_000))


def test_refuses_a_target_with_no_watermark_on_a_partition() -> None:
    with pytest.raises(SwitchRefused, match="version 'green' has no watermark on partition 1: "
                                            r"is it running and tagged\?"):
        switch(view((7_000, CAUGHT_UP), (7_000, {"blue": 5_000})))


def test_refuses_a_target_that_lags_the_leading_version() -> None:
    lagging = {"blue": 100_000, "green": 39_999}
    with pytest.raises(SwitchRefused, match=r"version 'green' lags on partition 0: watermark "
                                            r"39999, 60001 ms behind \(limit 60000 ms\)"):
        switch(view((100_000, lagging)))
    switch(view((100_000, {"blue": 100_000, "green": 40_000})))   # at the limit: allowed


def test_refuses_a_target_that_is_not_a_version_id() -> None:
    with pytest.raises(SwitchRefused, match="the plan would be invalid"):
        switch(view((7_000, {"blue": 5_000, "gr een": 5_000})), to="gr een")


def canary_view(share: float = 0.05) -> RouteView:
    """blue primary, green the canary of a share of the keys from 2,000 on."""
    v = view((7_000, CAUGHT_UP))
    v.plan = CutoverPlan.model_validate({"route": "r", "epoch": 1, "segments": [
        {"from_event_time": None, "primary": "blue"},
        {"from_event_time": 2_000, "primary": "blue",
         "canary": {"version": "green", "share": share}}]})
    return v


def test_switching_to_the_primary_during_a_canary_rolls_the_canary_back() -> None:
    plan, summary = switch(canary_view(), to="blue")
    assert [(s.primary, s.canary) for s in plan.segments[1:]] == [
        ("blue", plan.segments[1].canary), ("blue", None)]
    assert plan.transition == ("green", "blue", 17_000)
    assert summary == "route r: blue with canary green at 0.05 -> blue at event time 17000 " \
                      "(epoch 2)"


def test_switching_to_the_canary_version_gives_it_every_key() -> None:
    plan, _ = switch(canary_view(), to="green")
    assert plan.segments[-1].primary == "green" and plan.segments[-1].canary is None
    assert plan.transition == ("blue", "green", 17_000)


def test_switching_to_a_third_version_during_a_canary_is_refused_with_the_rule() -> None:
    with pytest.raises(SwitchRefused, match="neither segment 1's primary 'blue'"):
        switch(canary_view(), to="red", force=True)
