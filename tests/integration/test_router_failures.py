"""Router failures on the real broker: kill -9 (with and without the local store) and a second
worker joining (and leaving) during a switch. The whole output is checked exactly-once."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.integration.harness import (
    BASE_T,
    STEP,
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
)

pytestmark = pytest.mark.broker

N = 30_000


def _feed(env: Env, stop_at: int, boundary_box: list[int], chunk: int = 1000,
          pause: float = 0.0) -> threading.Thread:
    """Both versions emit all events in micro-batches (green slightly behind blue)."""
    blue, green = Job(env, "blue"), Job(env, "green")

    def run() -> None:
        for lo in range(0, stop_at, chunk):
            blue.emit(events(lo, lo + chunk))
            green.emit(events(lo, lo + chunk))
            if pause:
                time.sleep(pause)
        blue.heartbeat()
        green.heartbeat()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


@pytest.mark.parametrize("keep_store", [True, False], ids=["with-store", "store-lost"])
def test_kill9_and_restart_no_loss_no_duplicate(bootstrap: str, tmp_path: Path,
                                                keep_store: bool) -> None:
    env = Env(bootstrap, tmp_path, partitions=2)
    boundary = BASE_T + (N // 2) * STEP
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", str(boundary),
                   "--force") == 0   # no router yet: the plan is published up front
    router = RouterProcess(env, name="a")
    try:
        router.wait_started()
        # fed while the router runs, so that it is killed mid-stream: fed before it started,
        # the whole backlog could be routed in one or two batches between two polls below
        feeder = _feed(env, N, [], pause=0.1)
        env.wait_for("some output", lambda: env.output_count() > N // 5, 90, 0.05)
        router.kill9()
        mid = env.output_count()
        assert mid < N, "the kill came too late to test anything"
        if not keep_store:
            shutil.rmtree(env.state_dir)
        router = RouterProcess(env, name="b")
        router.wait_started()
        feeder.join(120)
        env.wait_output(N, timeout=120)
        check_output(env, events(0, N), lambda p, t: "green" if t >= boundary else "blue")
        log = router.text()
        assert ("rebuilt store" in log) == (not keep_store), log[-3000:]
        assert "already forwarded past the resume point" in log
    finally:
        router.stop()


def test_two_workers_rebalance_during_switch(bootstrap: str, tmp_path: Path) -> None:
    env = Env(bootstrap, tmp_path, partitions=4)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    a = RouterProcess(env, name="a")
    b: RouterProcess | None = None
    try:
        a.wait_started()
        feeder = _feed(env, N, [], chunk=500, pause=0.3)
        env.wait_horizon(BASE_T + 4000 * STEP, timeout=90, versions=("blue", "green"))
        assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                       "--margin", "5s") == 0
        plan = env.view().plan
        assert plan is not None and plan.transition is not None
        boundary = plan.transition[2]
        b = RouterProcess(env, name="b")          # joins during the switch: a rebalance
        env.wait_for("both workers own partitions", lambda: len(
            {w for _, _, w, _ in env.view().partitions.values()}) == 2, 90)
        env.wait_for("the handover on every partition", lambda: all(
            (ps.horizon or 0) > boundary for ps, *_r in env.view().partitions.values()), 90)
        b.stop()                                   # and leaves again: another rebalance
        feeder.join(120)
        assert env.cli("wait", "--route", env.route, "--timeout", "90s") == 0
        env.wait_output(N, timeout=120)
        # Where the plan reached a partition after its horizon passed the boundary, the
        # partition pinned it (the emulated jobs run ~200x faster than event time).
        parts = env.view().partitions
        eff = {p: ps.boundary for p, (ps, *_r) in parts.items()}
        assert all(b is not None and b >= boundary for b in eff.values()), parts
        check_output(env, events(0, N), lambda p, t: "green" if t >= eff[p] else "blue")
        a.assert_alive()
        if "transactions on" in a.text():
            # the partitions that stayed with a through both rebalances went on where they
            # stood, without a takeover (router.worker.assignment.Assignment.on_revoke)
            assert "kept through the rebalance" in a.text(), a.tail(40)
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_crash_between_checkpoint_and_output_loses_nothing(bootstrap: str,
                                                           tmp_path: Path) -> None:
    """A batch's checkpoint is durable before its output is produced: a worker that dies in
    between must leave a checkpoint that replays the batch, not one that resumes past it."""
    env = Env(bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    n = 4_000
    Job(env, "blue").emit(events(0, n))
    crashing = RouterProcess(env, name="a", extra_env={"CUTOVER_FAILPOINT": "after-checkpoint"})
    try:
        env.wait_for("the worker to die at the failpoint",
                     lambda: crashing.proc.poll() is not None, 90, 0.2)
        assert "failpoint after-checkpoint" in crashing.text(), crashing.text()[-3000:]
        assert env.output_count() == 0, "the failpoint fired after output was produced"
    finally:
        crashing.stop()
    router = RouterProcess(env, name="b")
    try:
        router.wait_started()
        env.wait_output(n, timeout=120)
        check_output(env, events(0, n), lambda p, t: "blue")
    finally:
        router.stop()
