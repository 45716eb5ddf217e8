"""``cutover rollout`` on the real broker with a real router worker and emulated tagged jobs
(processes that write what the tagger writes): the whole command, its journal, its rollback,
``--resume`` after ``kill -9`` and ``--abort``, each checked against the whole output topic.

The jobs emulate a stateless job on a clock (tests/rollout/emulated_job.py), so each test takes
seconds of job time; the same flows with real PySpark are in tests/spark/test_rollout_spark.py.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cutover.key_primary import in_canary
from cutover.rollout.journal import Phase, Trigger
from tests.integration.harness import free_port, run_cli_json
from tests.rollout.rollout_harness import (
    RolloutRoute,
    check_output,
    rolled_back_timeline,
    started_route,
)

pytestmark = pytest.mark.broker


@pytest.fixture
def route(bootstrap: str, tmp_path: Path) -> Iterator[RolloutRoute]:
    with started_route(bootstrap, tmp_path) as r:
        yield r


def rollout_args(r: RolloutRoute, *extra: str, green: tuple[str, ...] = (),
                 margin: str = "2s", deadline: str = "60s") -> list[str]:
    return ["--to", "green", "--start", r.job_command("green", *green),
            "--stop-old", r.stop_blue_command(), "--catch-up-lag", "2s",
            "--margin", margin, "--deadline", deadline, "--soak", "2s", *extra]


def test_rollout_switches_tears_down_and_is_done_with_every_record_once(
        route: RolloutRoute) -> None:
    run = route.rollout(*rollout_args(route))
    assert route.wait_exit(run, 120) == 0, run.tail(40)
    text = run.text()
    for phase in ("STARTING_NEW", "CATCHING_UP", "SWITCHING", "DRAINING", "TEARING_DOWN",
                  "SOAKING"):
        assert f"] {phase} started" in text and f"] {phase} ended after" in text, text
    assert "done in" in text and "Traceback" not in text
    final = route.journal()[-1]
    assert final.phase is Phase.DONE and final.owner is not None
    assert [s.phase for s in final.phases] == [Phase.STARTING_NEW, Phase.CATCHING_UP,
                                               Phase.SWITCHING, Phase.DRAINING,
                                               Phase.TEARING_DOWN, Phase.SOAKING]
    assert final.switch_boundary is not None
    boundary = final.switch_boundary
    versions = check_output(route, lambda p, t: "green" if t >= boundary else "blue")
    assert versions["blue"] > 0 and versions["green"] > 0


def test_a_comparison_within_the_limit_switches_and_finishes(route: RolloutRoute) -> None:
    """The comparison ends and the switch is published in the same round of the driver; the
    route's state it then looks at must be read after the switch, not before (a state read
    before it shows the old plan, which once failed every compared rollout as a plan changed
    under it)."""
    run = route.rollout(*rollout_args(route, "--compare", "--compare-for", "4s",
                                      "--max-diff", "20%", green=("--change-every", "10")))
    assert route.wait_exit(run, 120) == 0, run.tail(40)
    text = run.text()
    assert "COMPARING ended" in text and "done in" in text and "Traceback" not in text, text
    final = route.journal()[-1]
    assert final.phase is Phase.DONE, final
    assert [s.phase for s in final.phases] == [Phase.STARTING_NEW, Phase.CATCHING_UP,
                                               Phase.COMPARING, Phase.SWITCHING,
                                               Phase.DRAINING, Phase.TEARING_DOWN,
                                               Phase.SOAKING]
    assert final.compare is not None and final.compare.passed
    assert final.switch_boundary is not None
    boundary = final.switch_boundary
    versions = check_output(route, lambda p, t: "green" if t >= boundary else "blue")
    assert versions["blue"] > 0 and versions["green"] > 0


def test_a_comparison_over_the_limit_rolls_back_before_anything_is_switched(
        route: RolloutRoute) -> None:
    run = route.rollout(*rollout_args(route, "--compare", "--compare-for", "4s",
                                      "--max-diff", "1%", green=("--change-every", "10")))
    assert route.wait_exit(run, 120) == 1, run.tail(40)
    text = run.text()
    assert "COMPARING started" in text and "ROLLED_BACK" in text and "Traceback" not in text
    assert "amount " in text and " -> " in text, "no sample of a difference printed"
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK and final.switch_epoch is None
    assert final.rollback is not None and final.rollback.trigger is Trigger.COMPARE
    assert final.compare is not None and not final.compare.passed
    c = final.compare.counts
    assert c.total > 100 and 0.05 < c.different / c.total < 0.15, c
    assert c.only_old == c.only_new == 0, c
    assert final.outcome is not None and "Nothing was switched" in final.outcome
    plan = route.env.view().plan
    assert plan is not None and plan.epoch == 1 and len(plan.segments) == 1
    versions = check_output(route, lambda p, t: "blue")
    assert versions == {"blue": route.count}


def test_cutover_compare_counts_what_differs_and_exits_by_the_limit(route: RolloutRoute) -> None:
    green = route.start_green("--change-every", "10")
    route.env.wait_horizon(0, versions=("blue", "green"))
    args = ["--config", str(route.env.config), "--route", route.env.route, "--new", "green",
            "--for", "3s"]
    within = route.cli_child(["compare", *args, "--max-diff", "20%"], "compare-within")
    over = route.cli_child(["compare", *args, "--max-diff", "1%"], "compare-over")
    assert route.wait_exit(within, 60) == 0, within.text()
    assert route.wait_exit(over, 60) == 1, over.text()
    assert "within the limit: " in within.text() and "OVER the limit: " in over.text()
    assert "samples:" in within.text() and "amount " in within.text()
    green.stop()


@pytest.mark.slow   # 40 s; abort and a failed comparison roll back in the default suite
def test_a_new_version_that_stalls_after_the_switch_is_rolled_back_with_nothing_lost(
        route: RolloutRoute, tmp_path: Path) -> None:
    stall = tmp_path / "stall-green"
    run = route.rollout(*rollout_args(route, margin="8s", deadline="25s",
                                      green=("--stall-file", str(stall))))
    route.wait_phase(Phase.DRAINING, 60, watch=run)
    stall.touch()   # green hangs at its next batch, right after the switch
    assert route.wait_exit(run, 180) == 1, run.tail(40)
    text = run.text()
    assert "ROLLING_BACK started" in text and "Traceback" not in text
    assert "restarting green to emit the records the router gave it" in text
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK, final.outcome
    assert final.rollback is not None and final.rollback.trigger in (Trigger.DEADLINE,
                                                                    Trigger.STALLED)
    assert final.rollback.restarts == 1 and final.rollback.new_stopped
    assert final.outcome is not None and "consumers saw every record once" in final.outcome
    view = route.env.view()
    pins = {p: ps.boundary for p, (ps, *_) in view.partitions.items() if ps.pinned}
    boundary = final.switch_boundary
    assert boundary is not None and len(pins) == route.env.partitions, "green owed nothing"
    assert all(b is not None and b > boundary for b in pins.values())
    versions = check_output(route, rolled_back_timeline(route, final))
    assert versions["green"] > 0 and versions["blue"] > 0


def test_a_rollout_killed_in_draining_is_resumed_and_finishes(route: RolloutRoute) -> None:
    run = route.rollout(*rollout_args(route, margin="10s"))
    route.wait_phase(Phase.DRAINING, 60, watch=run)
    run.kill()   # kill -9: the rollout's own process group; green runs in its own session
    status = run_cli_json(route.env)["rollout"]
    assert status["phase"] == "DRAINING" and status["owner"]["pid"] == run.proc.pid
    resumed = route.rollout("--resume", name="resume")
    assert route.wait_exit(resumed, 120) == 0, resumed.tail(40)
    assert "DRAINING resumed" in resumed.text()
    records = route.journal()
    final = records[-1]
    assert final.phase is Phase.DONE and final.claim == 2
    assert [s.phase for s in final.phases][-3:] == [Phase.DRAINING, Phase.TEARING_DOWN,
                                                    Phase.SOAKING]
    assert sum(1 for r in records if r.new_process is not None
               and r.new_process != final.new_process) == 0, "green was started twice"
    boundary = final.switch_boundary
    assert boundary is not None
    check_output(route, lambda p, t: "green" if t >= boundary else "blue")


def test_abort_asks_the_running_rollout_to_roll_back(route: RolloutRoute) -> None:
    port = free_port()
    run = route.rollout(*rollout_args(route, "--metrics-port", str(port), margin="30s"))
    route.wait_phase(Phase.DRAINING, 60, watch=run)   # DRAINING outlasts the checks below
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    assert (f'cutover_rollout_phase{{route="{route.env.route}",from="blue",to="green",'
            'phase="DRAINING"} 1').encode() in metrics
    second = route.rollout(*rollout_args(route), name="second")
    assert route.wait_exit(second, 60) == 2
    assert "has a rollout to green in phase DRAINING" in second.text(), second.text()
    resume = route.rollout("--resume", name="resume")
    assert route.wait_exit(resume, 60) == 2
    assert "is still driven by pid" in resume.text(), resume.text()
    abort = route.rollout("--abort", name="abort")
    assert route.wait_exit(abort, 90) == 1, abort.tail(40)
    assert route.wait_exit(run, 30) == 1, run.tail(40)
    assert "asked the running rollout" in abort.text()
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK and final.claim == 1
    assert final.rollback is not None and final.rollback.trigger is Trigger.ABORT
    plan = route.env.view().plan
    assert plan is not None and plan.epoch == 3 and [s.primary for s in plan.segments] == [
        "blue"]
    # what the router had given green before the abort, if anything, green delivered
    check_output(route, rolled_back_timeline(route, final))


def test_a_rollout_by_key_share_steps_through_the_shares_with_each_key_once(
        route: RolloutRoute) -> None:
    run = route.rollout(*rollout_args(route, "--canary", "25%,100%", "--canary-for", "3s",
                                      "--compare", "--compare-for", "3s", "--max-diff", "20%",
                                      green=("--change-every", "10")))
    assert route.wait_exit(run, 150) == 0, run.tail(40)
    text = run.text()
    for line in ("by key share (25%, 100%", "CANARY started: step 1/2 (25% of the keys)",
                 "the canary's 25% of the keys", "SWITCHING started: step 2/2 (100% of the keys)",
                 "done in"):
        assert line in text, (line, text)
    assert "Traceback" not in text
    final = route.journal()[-1]
    assert final.phase is Phase.DONE and final.step == 1
    assert [s.phase for s in final.phases] == [
        Phase.STARTING_NEW, Phase.CATCHING_UP, Phase.SWITCHING, Phase.DRAINING, Phase.CANARY,
        Phase.SWITCHING, Phase.DRAINING, Phase.TEARING_DOWN, Phase.SOAKING]
    assert final.compare is not None and final.compare.passed
    plan = route.env.view().plan
    assert plan is not None
    (_, canary_seg, whole) = plan.segments
    assert canary_seg.canary is not None and canary_seg.canary.share == 0.25
    assert whole.primary == "green" and whole.canary is None
    start, every = canary_seg.from_event_time, whole.from_event_time
    assert start is not None and every is not None

    def primary(p: int, t: int, key: bytes | None) -> str:
        if t >= every or (t >= start and in_canary(key, 2_500)):
            return "green"
        return "blue"

    versions = check_output(route, lambda p, t: "", by_key=primary)
    assert versions["blue"] > 0 and versions["green"] > 0


def test_a_failed_comparison_of_the_canary_s_keys_rolls_the_canary_back(
        route: RolloutRoute) -> None:
    run = route.rollout(*rollout_args(route, "--canary", "25%,100%", "--canary-for", "3s",
                                      "--compare", "--compare-for", "3s", "--max-diff", "1%",
                                      green=("--change-every", "10")))
    assert route.wait_exit(run, 150) == 1, run.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK, final.outcome
    assert final.rollback is not None and final.rollback.trigger is Trigger.COMPARE
    assert "step 1/2 (25% of the keys)" in final.rollback.reason
    plan = route.env.view().plan   # blue for every key, pinned above what was decided
    assert plan is not None and [(x.primary, x.canary) for x in plan.segments] == [("blue", None)]
    given = rolled_back_timeline(route, final)   # the step's range green had been given

    def primary(p: int, t: int, key: bytes | None) -> str:
        return "green" if given(p, t) == "green" and in_canary(key, 2_500) else "blue"

    versions = check_output(route, lambda p, t: "", by_key=primary)
    assert versions["blue"] > 0 and versions["green"] > 0
