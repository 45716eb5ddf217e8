"""The soak's plans: switches back and forth, or a canary's steps in turn and then no more."""

from __future__ import annotations

import time

import pytest

from cutover.control.routes import Target
from cutover.plan import CutoverPlan, parse_plan
from tests.soak import plans
from tests.soak.plans import PlanSwitcher, canary_steps


def _switcher(monkeypatch: pytest.MonkeyPatch, steps: tuple[plans.Step, ...] | None,
              ) -> PlanSwitcher:
    def publish(_t: Target, plan: CutoverPlan) -> CutoverPlan:
        return parse_plan(plan.to_json(), route=plan.route)   # checked as a router would

    monkeypatch.setattr(plans, "publish_plan", publish)
    clock = iter(range(1_000_000, 2_000_000, 1000))
    return PlanSwitcher(Target({}, "c", "s"), "r", 0.01, 500, lambda: next(clock), steps)


def test_a_canary_s_steps_are_published_in_turn_then_no_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _switcher(monkeypatch, canary_steps("green:5%", "green:25%", "green"))
    sw.publish_first()
    sw.start()
    time.sleep(0.3)
    sw.stop()
    assert sw.last_step_published and not sw.errors
    last = sw.published[-1]
    assert [p.epoch for p in sw.published] == [1, 2, 3, 4]
    assert [(s.primary, s.canary and s.canary.share) for s in last.segments] == [
        ("blue", None), ("blue", 0.05), ("blue", 0.25), ("green", None)]


def test_a_rollback_gives_the_canary_s_keys_back(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = canary_steps("green:25%", "blue")
    assert [s.describe() for s in steps] == ["blue + green 25%", "blue whole"]
    sw = _switcher(monkeypatch, steps)
    sw.publish_first()
    sw.start()
    time.sleep(0.2)
    sw.stop()
    assert sw.last_step_published and not sw.errors
    assert [s.rule.describe() for s in sw.published[-1].segments] == [
        "primary 'blue'", "primary 'blue', canary 'green' at 0.25", "primary 'blue'"]


def test_without_steps_the_versions_switch_back_and_forth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _switcher(monkeypatch, None)
    sw.publish_first()
    sw.start()
    time.sleep(0.1)
    sw.stop()
    assert not sw.last_step_published and len(sw.published) > 3
    assert [s.primary for s in sw.published[-1].segments[:3]] == ["blue", "green", "blue"]
