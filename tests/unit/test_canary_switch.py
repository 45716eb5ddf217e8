"""``cutover switch --canary VERSION:SHARE``: the plan it publishes, its safety checks (those of
a whole switch) and every refusal, in one sentence with the fix."""

from __future__ import annotations

import pytest
from test_next_plan import CAUGHT_UP, MARGIN, MAX_LAG, NOW, canary_view, view

from cutover.cli import main
from cutover.cli.errors import CliError
from cutover.cli.shares import parse_canary, parse_share, parse_steps
from cutover.control.next_plan import At, NextPlan, SwitchRefused, next_canary_plan
from cutover.control.routes import RouteView
from cutover.key_primary import Canary

AUTO = At("auto")


def canary(v: RouteView, text: str, at: At = AUTO, force: bool = False) -> NextPlan:
    return next_canary_plan(v, parse_canary(text), at, MARGIN, MAX_LAG, force, NOW,
                            issued_by="ops@host")


def test_a_canary_keeps_the_primary_and_gives_the_version_its_share_above_the_horizons() -> None:
    plan, summary = canary(view((7_000, CAUGHT_UP), (6_000, CAUGHT_UP)), "green:5%")
    last = plan.segments[-1]
    assert (last.from_event_time, last.primary, last.canary) == (
        17_000, "blue", Canary(version="green", share=0.05))
    assert plan.epoch == 2 and plan.transition == ("blue", "green", 17_000)
    assert summary == "route r: blue -> blue with canary green at 0.05 at event time 17000 " \
                      "(epoch 2)"


def test_a_wider_share_is_a_later_segment_of_the_same_canary() -> None:
    plan, _ = canary(canary_view(0.05), "green:25%")
    assert [(s.from_event_time, s.canary.share if s.canary else None)
            for s in plan.segments] == [(None, None), (2_000, 0.05), (17_000, 0.25)]


def test_a_canary_boundary_is_refused_behind_a_horizon_as_a_whole_switch_is() -> None:
    with pytest.raises(SwitchRefused, match="not ahead of partition 0's horizon 7000 by the "
                                            "margin 10000 ms; use --at auto"):
        canary(view((7_000, CAUGHT_UP)), "green:5%", at=At("instant", 8_000))


def test_a_canary_of_a_version_not_running_or_lagging_is_refused() -> None:
    with pytest.raises(SwitchRefused, match="'green' has no watermark on partition 0"):
        canary(view((7_000, {"blue": 5_000})), "green:5%")
    with pytest.raises(SwitchRefused, match="'green' lags on partition 0"):
        canary(view((7_000, {"blue": 500_000, "green": 5_000})), "green:5%")


@pytest.mark.parametrize(("v", "text", "says"), [
    (canary_view(0.25), "green:5%", "shares only grow; give 25.00% or more, or roll the "
                                    "canary back with `--to blue`"),
    (canary_view(0.05), "green:5%", "already has 5.00% of the keys of route r; nothing to "
                                    "switch"),
    (canary_view(0.05), "red:10%", "has a canary of 'green' in force; end it first with "
                                   "`--to green`"),
    (view((7_000, CAUGHT_UP)), "blue:5%", "'blue' is already the primary of route r"),
    (view((7_000, CAUGHT_UP), plan_epoch=None), "green:5%", "has no plan yet"),
])
def test_refusals_say_how_to_proceed(v: RouteView, text: str, says: str) -> None:
    with pytest.raises(SwitchRefused, match=None) as refused:
        canary(v, text, force=True)
    assert says in str(refused.value)


@pytest.mark.parametrize(("text", "share"), [("5%", 0.05), ("0.05", 0.05), ("100%", 1.0),
                                             ("0.01%", 0.0001), (" 25% ", 0.25)])
def test_shares_as_a_person_types_them(text: str, share: float) -> None:
    assert parse_share(text, "--canary") == share


@pytest.mark.parametrize(("text", "says"), [
    ("0%", "not a share of the keys"), ("150%", "not a share of the keys"),
    ("five", "not a share of the keys"), ("0.001%", "not a whole number of basis points"),
])
def test_a_share_that_is_not_one_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(CliError, match=says):
        parse_share(text, "--canary")


def test_a_canary_without_a_version_or_with_a_bad_one_is_refused() -> None:
    with pytest.raises(CliError, match="names no version; write VERSION:SHARE"):
        parse_canary("5%")
    with pytest.raises(CliError, match="version 'gr een'"):
        parse_canary("gr een:5%")


def test_rollout_steps_only_grow() -> None:
    assert parse_steps("5%,25%,100%") == (0.05, 0.25, 1.0)
    with pytest.raises(CliError, match="shares only grow"):
        parse_steps("25%,5%")
    with pytest.raises(CliError, match="gives no share"):
        parse_steps(",")
    with pytest.raises(CliError, match=r"end the steps with 100%, e\.g\. --canary 5%,25%,100%"):
        parse_steps("5%,25%")


@pytest.mark.parametrize(("argv", "says"), [
    (["--to", "green", "--canary", "green:5%"], "--to VERSION (every key) or --canary"),
    ([], "--to VERSION (every key) or --canary"),
    (["--canary", "green:5"], "not a share of the keys"),
])
def test_the_command_refuses_in_one_sentence_without_a_traceback(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["switch", "--bootstrap", "127.0.0.1:1", "--route", "r", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
