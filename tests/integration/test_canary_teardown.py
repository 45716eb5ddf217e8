"""``cutover switch --canary`` and ``cutover wait`` on the real broker: while a canary is in
force the route is HANDED_OVER, never CLEAR_TO_TEARDOWN, and ``wait`` does not exit 0 for
teardown until a plan without the canary is clear."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import BASE_T, STEP, Env, Job, RouterProcess, events, run_cli_json

pytestmark = pytest.mark.broker


@pytest.fixture
def env(bootstrap: str, tmp_path: Path) -> Env:
    return Env(bootstrap, tmp_path)


@pytest.fixture
def router(env: Env) -> Iterator[RouterProcess]:
    proc = RouterProcess(env)
    proc.wait_started()
    yield proc
    proc.stop()


def both(blue: Job, green: Job, lo: int, hi: int) -> None:
    for start in range(lo, hi, 100):
        blue.emit(events(start, start + 100))
        green.emit(events(start, start + 100))


def test_the_old_version_is_not_cleared_for_teardown_while_it_serves_keys(
        env: Env, router: RouterProcess) -> None:
    blue, green = Job(env, "blue"), Job(env, "green")
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    both(blue, green, 0, 300)
    env.wait_horizon(BASE_T + 298 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--canary", "green:25%", "--at", "auto",
                   "--margin", "1s") == 0
    assert env.cli("switch", "--route", env.route, "--canary", "green:5%", "--at", "auto",
                   "--margin", "1s") == 2   # shares only grow: refused
    both(blue, green, 300, 600)
    assert env.cli("wait", "--route", env.route, "--timeout", "60s") == 6
    assert env.cli("wait", "--route", env.route, "--for", "handed-over",
                   "--timeout", "10s") == 0
    tr = run_cli_json(env)["transition"]
    assert (tr["state"], tr["from"], tr["to"], tr["share"]) == (
        "HANDED_OVER", "blue", "green", 0.25)
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                   "--margin", "1s") == 0   # every key to green
    both(blue, green, 600, 900)
    # the plan may reach a partition after its horizon passed the boundary (then it is pinned
    # above it): once every partition applied it, the versions write past any pin
    env.wait_for("epoch 3 on every partition", lambda: {
        ps["epoch"] for ps in run_cli_json(env)["partitions"].values()} == {3}, 60, 0.5)
    both(blue, green, 900, 1000)
    assert env.cli("wait", "--route", env.route, "--timeout", "60s") == 0
    tr = run_cli_json(env)["transition"]
    assert tr["state"] == "CLEAR_TO_TEARDOWN" and "share" not in tr
    evs = events(0, 1000)
    env.wait_output(len(evs))
    assert run_cli_json(env)["counters"]["forwarded"] == len(evs)
    router.assert_alive()
