"""``cutover rollout`` with real PySpark jobs under ``cutover tag`` and a real router worker:
blue (examples/jobs/windowed_totals.py) runs, the rollout starts green, and the whole output
is checked against a reference computed from the input alone for the timeline the rollout
left on each partition.

The happy path runs in the default suite; the comparison, the stall after the switch, kill -9
and resume, and --abort are slow (two Spark jobs each, about two to four minutes): `make
test-all` or `pytest -m slow tests/spark/test_rollout_spark.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cutover.rollout.journal import Phase, Trigger
from tests.spark.rollout_spark_support import SparkRoute, check_output, switch_timeline

pytestmark = [pytest.mark.spark, pytest.mark.broker]


@pytest.fixture
def route(bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[SparkRoute]:
    r = SparkRoute(bootstrap, tmp_path, seed=41 + len(request.node.name) % 7)
    r.start()
    try:
        yield r
    finally:
        r.stop_all()


def rollout_args(r: SparkRoute, *extra: str, green: str | None = None,
                 margin: str = "20s", deadline: str = "10m") -> list[str]:
    return ["--to", "green", "--start", green or r.green_command(),
            "--stop-old", r.stop_blue_command(), "--catch-up-lag", "20s", "--margin", margin,
            "--deadline", deadline, "--soak", "5s", *extra]


@pytest.mark.slow  # two Spark jobs for 2+ minutes; the emulated happy path is in the default suite
def test_rollout_of_the_windowed_job_is_done_and_the_output_equals_the_reference(
        route: SparkRoute) -> None:
    run = route.rollout(*rollout_args(route))
    assert route.wait_exit(run, 420) == 0, run.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.DONE and final.switch_boundary is not None
    assert "Traceback" not in run.text()
    assert route.blue.proc.poll() is not None, "blue was not stopped at CLEAR_TO_TEARDOWN"
    windows = check_output(route, switch_timeline(final.switch_boundary))
    assert windows["blue"] > 0 and windows["green"] > 0, windows


@pytest.mark.slow
def test_compare_catches_a_green_that_changes_values_and_aborts_before_the_switch(
        route: SparkRoute) -> None:
    run = route.rollout(*rollout_args(route, "--compare", "--compare-for", "20s",
                                      "--max-diff", "1%"))
    assert route.wait_exit(run, 420) == 1, run.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK and final.switch_epoch is None
    assert final.rollback is not None and final.rollback.trigger is Trigger.COMPARE
    assert final.compare is not None and final.compare.counts.different > 0
    assert final.compare.counts.equal == 0   # green rounds every total and adds max_amount
    assert "+max_amount=" in run.text()
    plan = route.view().plan
    assert plan is not None and plan.epoch == 1
    assert set(check_output(route, lambda p, t: "blue")) == {"blue"}


@pytest.mark.slow
def test_a_green_that_stalls_after_the_switch_is_rolled_back_at_the_deadline(
        route: SparkRoute, tmp_path: Path) -> None:
    stall = tmp_path / "stall"
    green = route.green_command("windowed_totals_stuck.py", "--stall-file", str(stall))
    run = route.rollout(*rollout_args(route, green=green, margin="40s", deadline="8m"))
    route.wait_phase(Phase.DRAINING, 360, watch=run)
    stall.touch()
    assert route.wait_exit(run, 600) == 1, run.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK, final.outcome
    assert final.rollback is not None and final.rollback.trigger in (Trigger.DEADLINE,
                                                                    Trigger.STALLED)
    assert (tmp_path / "stall.taken").exists()
    assert final.switch_boundary is not None
    # A partition that had routed past the switch keeps green's decided range: the rollback's
    # boundary is pinned above its horizon. One that had not (the stall came first, which a
    # loaded machine makes likely) has no pin and is blue throughout, as if back from the
    # switch boundary itself.
    pins = {p: ps.boundary if ps.boundary is not None else final.switch_boundary
            for p, (ps, *_) in route.view().partitions.items()}
    windows = check_output(route, switch_timeline(final.switch_boundary, pins))
    assert windows["blue"] > 0, windows


@pytest.mark.slow
def test_a_rollout_killed_in_draining_is_resumed_and_done(route: SparkRoute) -> None:
    run = route.rollout(*rollout_args(route, margin="60s"))
    route.wait_phase(Phase.DRAINING, 360, watch=run)
    run.kill()
    resumed = route.rollout("--resume", name="resume")
    assert route.wait_exit(resumed, 420) == 0, resumed.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.DONE and final.claim == 2
    assert final.switch_boundary is not None
    windows = check_output(route, switch_timeline(final.switch_boundary))
    assert windows["blue"] > 0 and windows["green"] > 0, windows


@pytest.mark.slow
def test_abort_of_a_killed_rollout_takes_it_over_and_rolls_back(route: SparkRoute) -> None:
    run = route.rollout(*rollout_args(route, margin="60s"))
    route.wait_phase(Phase.DRAINING, 360, watch=run)
    run.kill()
    abort = route.rollout("--abort", name="abort")
    assert route.wait_exit(abort, 420) == 1, abort.tail(40)
    final = route.journal()[-1]
    assert final.phase is Phase.ROLLED_BACK and final.claim == 2
    assert final.rollback is not None and final.rollback.trigger is Trigger.ABORT
    plan = route.view().plan
    assert plan is not None and [s.primary for s in plan.segments] == ["blue"]
    pins = {p: ps.boundary for p, (ps, *_) in route.view().partitions.items()}
    assert final.switch_boundary is not None
    check_output(route, switch_timeline(final.switch_boundary,
                                        {p: b for p, b in pins.items() if b is not None}
                                        or None))
