"""Ordered handover over ``max_held`` on the real broker: the old version goes silent after a
switch while the new one runs on; each partition keeps at most ``max_held`` records, pauses and
says so (status, holdups, ``cutover status``, metrics); when the old version comes back every
record reaches the output exactly once, every record below the boundary before any above it,
and the new version's records in their raw order (router.rule.held_bound)."""

from __future__ import annotations

import contextlib
import io
import urllib.request
from pathlib import Path

import pytest

from cutover.headers import SRC
from tests.integration.harness import (
    BASE_T,
    STEP,
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
    free_port,
    run_cli_json,
)

pytestmark = pytest.mark.broker

MAX_HELD = 40


def _switch_and_stall(env: Env) -> tuple[Job, int]:
    """Both versions run, the route switches to green, then blue goes silent while green
    writes 25 times ``max_held`` records per partition."""
    blue, green = Job(env, "blue"), Job(env, "green")
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    for lo in range(0, 300, 100):
        blue.emit(events(lo, lo + 100))
        green.emit(events(lo, lo + 100))
    env.wait_horizon(BASE_T + 298 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                   "--margin", "1s") == 0
    plan = env.view().plan
    assert plan is not None and plan.transition is not None
    boundary = plan.transition[2]
    for lo in range(300, 300 + 25 * MAX_HELD * env.partitions, 200):
        green.emit(events(lo, lo + 200))
    return blue, boundary


def _paused_everywhere(env: Env) -> bool:
    parts = env.view().partitions
    return len(parts) == env.partitions and all(ps.paused for ps, *_ in parts.values())


def _check_order(env: Env, out: list, boundary: int) -> None:
    for p in range(env.partitions):
        mine = [m for m in out if m.partition() == p]
        ts = [int(dict(m.headers())["bg.event_time"]) for m in mine]
        first_new = next(i for i, t in enumerate(ts) if t >= boundary)
        assert all(t >= boundary for t in ts[first_new:]), "a record below the boundary late"
        green_offsets = [int(dict(m.headers())[SRC].decode().rsplit(":", 1)[1])
                         for m in mine if dict(m.headers())["bg.version"] == b"green"]
        assert green_offsets == sorted(green_offsets), "green's records out of raw order"


@pytest.mark.parametrize("per_version_inputs", [False, True], ids=["shared", "per-version"])
def test_silent_old_version_pauses_then_everything_arrives_once_in_order(
        bootstrap: str, tmp_path: Path, per_version_inputs: bool) -> None:
    env = Env(bootstrap, tmp_path, partitions=2, max_held=MAX_HELD, http_port=free_port(),
              per_version_inputs=per_version_inputs)
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue, boundary = _switch_and_stall(env)
        env.wait_for("every partition paused", lambda: _paused_everywhere(env))
        st = run_cli_json(env)
        assert st["transition"]["state"] == "PENDING"
        assert all(0 < ps["held"] <= MAX_HELD for ps in st["partitions"].values())
        why = " ".join(h["why"] for h in st["transition"]["holdups"])
        assert "paused" in why and "'blue'" in why and str(boundary) in why
        assert st["counters"]["pauses"] >= env.partitions
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert env.cli("status", "--route", env.route) == 0
        assert "PAUSED (max_held)" in buf.getvalue()
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{env.http_port}/metrics").read().decode()
        assert f'cutover_paused_partitions{{route="{env.route}"}} {env.partitions}' in metrics

        last = 300 + 25 * MAX_HELD * env.partitions
        blue.emit(events(300, last))  # the old version comes back and catches up
        assert env.cli("wait", "--route", env.route, "--timeout", "90s") == 0
        evs = events(0, last)
        env.wait_output(len(evs))
        out = check_output(env, evs, lambda p, t: "green" if t >= boundary else "blue")
        _check_order(env, out, boundary)
        st = run_cli_json(env)
        assert not any(ps["paused"] for ps in st["partitions"].values())
        assert st["counters"]["forwarded"] == len(evs) and st["counters"]["held"] == 0
        router.assert_alive()
    finally:
        router.stop()


def test_a_worker_killed_while_paused_loses_nothing(bootstrap: str, tmp_path: Path) -> None:
    env = Env(bootstrap, tmp_path, partitions=2, max_held=MAX_HELD)
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue, boundary = _switch_and_stall(env)
        env.wait_for("every partition paused", lambda: _paused_everywhere(env))
        router.kill()
        router = RouterProcess(env, name="w2")
        router.wait_started()
        env.wait_for("every partition paused again", lambda: _paused_everywhere(env))
        last = 300 + 25 * MAX_HELD * env.partitions
        blue.emit(events(300, last))
        assert env.cli("wait", "--route", env.route, "--timeout", "90s") == 0
        evs = events(0, last)
        env.wait_output(len(evs))
        out = check_output(env, evs, lambda p, t: "green" if t >= boundary else "blue")
        _check_order(env, out, boundary)
    finally:
        router.stop()
