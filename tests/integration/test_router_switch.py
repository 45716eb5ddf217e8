"""Router on the real broker: switching, duplicates, pinning, readiness, rollback."""

from __future__ import annotations

import contextlib
import io
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cutover.headers import TaggedRecord
from cutover.plan import CutoverPlan, Segment
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


@pytest.fixture
def env(bootstrap: str, tmp_path: Path) -> Env:
    return Env(bootstrap, tmp_path)


@pytest.fixture
def router(env: Env) -> Iterator[RouterProcess]:
    proc = RouterProcess(env)
    proc.wait_started()
    yield proc
    proc.stop()


def _first_plan(env: Env) -> None:
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0


def _boundary(env: Env) -> int:
    plan = env.view().plan
    assert plan is not None and plan.transition is not None
    return plan.transition[2]


def test_switch_mid_stream(bootstrap: str, tmp_path: Path) -> None:
    env = Env(bootstrap, tmp_path, partitions=2, http_port=free_port())
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue, green = Job(env, "blue"), Job(env, "green")
        _first_plan(env)
        for lo in range(0, 600, 100):  # both versions run; green a little behind
            blue.emit(events(lo, lo + 100))
            green.emit(events(lo, lo + 80) if lo == 500 else events(lo, lo + 100))
        green.emit(events(580, 600))
        env.wait_horizon(BASE_T + 598 * STEP, versions=("blue", "green"))
        assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                       "--margin", "1s") == 0
        boundary = _boundary(env)
        assert boundary == BASE_T + 599 * STEP + 1000
        for lo in range(600, 1200, 100):
            green.emit(events(lo, lo + 100))  # the new version leads: its records are held
            blue.emit(events(lo, lo + 100))
        assert env.cli("wait", "--route", env.route, "--for", "clear-to-teardown",
                       "--timeout", "60s") == 0
        evs = events(0, 1200)
        env.wait_output(len(evs))
        out = check_output(env, evs, lambda p, t: "green" if t >= boundary else "blue")
        # Ordered handover: per partition no record below the boundary after one above it.
        for p in range(env.partitions):
            ts = [int(dict(m.headers())["bg.event_time"]) for m in out if m.partition() == p]
            first_new = next(i for i, t in enumerate(ts) if t >= boundary)
            assert all(t >= boundary for t in ts[first_new:])
        st = run_cli_json(env)
        assert st["transition"]["state"] == "CLEAR_TO_TEARDOWN"
        assert st["counters"]["forwarded"] == len(evs)
        assert {(ps["epoch"], ps["boundary"]) for ps in st["partitions"].values()} == {
            (2, boundary)}
        assert st["counters"]["suppressed"] == {"green": 600 - 0 + (boundary - BASE_T) // STEP
                                                - 600, "blue": 1200 - (boundary - BASE_T)
                                                // STEP}
        status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{env.http_port}/status"))
        assert status["routes"][env.route]["epoch"] == 2
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{env.http_port}/metrics").read()
        assert f'cutover_forwarded_total{{route="{env.route}"}} {len(evs)}'.encode() in metrics
        # the added latency is fed from the batches written (a sample of each)
        count = re.search(rf'cutover_added_latency_seconds_count{{route="{env.route}"}} (\d+)'
                          .encode(), metrics)
        assert count is not None and int(count.group(1)) > 0
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert env.cli("status", "--route", env.route) == 0
        assert "CLEAR_TO_TEARDOWN" in buf.getvalue() and "wm green" in buf.getvalue()
        router.assert_alive()
    finally:
        router.stop()


def test_replayed_duplicates_removed(env: Env, router: RouterProcess) -> None:
    blue = Job(env, "blue")
    _first_plan(env)
    blue.emit(events(0, 400))
    blue.emit(events(100, 300))      # the job replays a batch after a restart
    blue.emit(events(400, 500))
    blue.emit(events(350, 500))
    evs = events(0, 500)
    env.wait_output(len(evs))
    env.wait_horizon(BASE_T + 498 * STEP)
    check_output(env, evs, lambda p, t: "blue")
    assert run_cli_json(env)["counters"]["duplicates"] == 200 + 150


def test_late_plan_is_pinned(env: Env, router: RouterProcess) -> None:
    blue, green = Job(env, "blue"), Job(env, "green")
    _first_plan(env)
    blue.emit(events(0, 300))
    view = env.wait_horizon(BASE_T + 298 * STEP)
    horizons = {p: ps.horizon for p, (ps, *_r) in view.partitions.items()}
    late = BASE_T + 100 * STEP  # far below what the router has already routed
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", str(late)) != 0
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", str(late),
                   "--force") == 0
    env.wait_for("the plan pinned on every partition", lambda: all(
        ps.pinned for ps, *_r in env.view().partitions.values()
        ) and env.view().plan.epoch == 2)
    parts = env.view().partitions
    assert {p: ps.pinned for p, (ps, *_r) in parts.items()} == {
        p: (h + 1,) for p, h in horizons.items()}
    assert {p: (ps.epoch, ps.boundary) for p, (ps, *_r) in parts.items()} == {
        p: (2, h + 1) for p, h in horizons.items()}
    green.emit(events(0, 600))        # green's copies of already-routed events come late
    blue.emit(events(300, 600))
    evs = events(0, 600)
    env.wait_output(len(evs))
    check_output(env, evs, lambda p, t: "green" if t > horizons[p] else "blue")


def test_idle_partitions_clear_through_heartbeats(bootstrap: str, tmp_path: Path) -> None:
    env = Env(bootstrap, tmp_path, partitions=4)
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue, green = Job(env, "blue"), Job(env, "green")
        _first_plan(env)
        data = [e for e in events(0, 800) if e.i % 4 in (0, 1)]  # partitions 2, 3 stay idle
        blue.emit(data[:200])
        green.emit(data[:200])
        env.wait_for("both versions' watermarks on every partition", lambda: [
            sorted(ps.watermarks) for ps, *_r in env.view().partitions.values()
            ] == [["blue", "green"]] * 4)
        assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                       "--margin", "1s") == 0
        boundary = _boundary(env)
        assert env.cli("wait", "--route", env.route, "--timeout", "2s") == 4  # PENDING
        blue.emit(data[200:])
        green.emit(data[200:])
        assert env.cli("wait", "--route", env.route, "--timeout", "60s") == 0
        idle = env.view().partitions
        assert idle[2][0].horizon is None and idle[2][0].watermarks["blue"] >= boundary
        env.wait_output(len(data))
        check_output(env, data, lambda p, t: "green" if t >= boundary else "blue")
    finally:
        router.stop()


def test_deadline_passes_stalled(env: Env, router: RouterProcess,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    blue, green = Job(env, "blue"), Job(env, "green")
    _first_plan(env)
    blue.emit(events(0, 200))
    green.emit(events(0, 200))
    env.wait_horizon(BASE_T + 198 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "+2s",
                   "--deadline", "+3s", "--margin", "1s") == 0
    blue.emit(events(200, 600))       # green stops short of the boundary (it crashed)
    capsys.readouterr()
    assert env.cli("wait", "--route", env.route, "--timeout", "30s") == 3
    err = capsys.readouterr().err
    assert "STALLED" in err and "'green'" in err and "partition 0" in err
    assert run_cli_json(env)["transition"]["state"] == "STALLED"


def test_rollback_by_a_later_plan(env: Env, router: RouterProcess) -> None:
    blue, green = Job(env, "blue"), Job(env, "green")
    _first_plan(env)
    for lo in range(0, 300, 100):
        blue.emit(events(lo, lo + 100))
        green.emit(events(lo, lo + 100))
    env.wait_horizon(BASE_T + 298 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                   "--margin", "1s") == 0
    t1 = _boundary(env)
    for lo in range(300, 600, 100):
        blue.emit(events(lo, lo + 100))
        green.emit(events(lo, lo + 100))
    env.wait_horizon(BASE_T + 598 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto",
                   "--margin", "1s") == 0   # green misbehaves: back to blue
    plan = env.view().plan
    assert plan is not None and plan.epoch == 3 and len(plan.segments) == 3
    t2 = plan.segments[2].from_event_time
    for lo in range(600, 900, 100):
        blue.emit(events(lo, lo + 100))
        green.emit(events(lo, lo + 100))
    assert env.cli("wait", "--route", env.route, "--timeout", "60s") == 0
    evs = events(0, 900)
    env.wait_output(len(evs))
    check_output(env, evs, lambda p, t: "green" if t1 <= t < t2 else "blue")


def test_dead_letter_and_plan_rejection(env: Env, router: RouterProcess) -> None:
    blue = Job(env, "blue")
    _first_plan(env)
    good = CutoverPlan(route=env.route, epoch=1,
                       segments=(Segment(from_event_time=None, primary="blue"),))
    env.publish_raw_plan(b"{not json")
    env.publish_raw_plan(b"x" * 200_000)
    env.publish_raw_plan(json.dumps({"route": env.route, "epoch": "two",
                                     "segments": "blue"}).encode())
    env.publish_plan(good)            # a replay: ignored silently
    env.publish_plan(good.model_copy(update={"epoch": 0}))  # stale
    env.publish_raw_plan(b"{}", key=b"\xff\xfe")  # key is not UTF-8
    bad = [
        ("no version", [("bg.event_time", b"1")]),
        ("bad event time", [("bg.version", b"blue"), ("bg.event_time", b"soon")]),
        ("bad version", [("bg.version", b"bl ue"), ("bg.event_time", b"1")]),
    ]
    from tests.integration.harness import produce_raw

    for i, (_, headers) in enumerate(bad):
        produce_raw(env, f"bad{i}".encode(), b"payload", headers, partition=i % 2)
    blue.emit(events(0, 200))
    evs = events(0, 200)
    env.wait_output(len(evs))
    check_output(env, evs, lambda p, t: "blue")
    dead = env.read(env.dlq)
    assert sorted(m.key() for m in dead) == [b"bad0", b"bad1", b"bad2"]
    reasons = {m.key(): dict(m.headers())["bg.error"].decode() for m in dead}
    assert "bg.version" in reasons[b"bad0"] and "bg.event_time" in reasons[b"bad1"]
    assert all(m.value() == b"payload" for m in dead)
    env.wait_for("rejections on the status topic", lambda: sum(
        1 for s in env.status_messages() if s["event"] == "plan_rejected") >= 4)
    rejected = [s for s in env.status_messages() if s["event"] == "plan_rejected"]
    reasons_text = " | ".join(s["reason"] for s in rejected)
    assert "not JSON" in reasons_text and "over the" in reasons_text
    assert "epoch" in reasons_text and "stale" in reasons_text
    assert all(s["plan"]["epoch"] == 1 for s in rejected)  # the last good plan is kept
    router.assert_alive()
    assert env.view().plan.epoch == 1


def test_last_good_plan_survives_a_restart(bootstrap: str, tmp_path: Path) -> None:
    """After compaction only a bad record may be left on the control topic: a restarted router
    recovers the last good plan from the status topic."""
    env = Env(bootstrap, tmp_path)
    router = RouterProcess(env)
    router.wait_started()
    blue, green = Job(env, "blue"), Job(env, "green")
    _first_plan(env)
    blue.emit(events(0, 100))
    green.emit(events(0, 100))
    env.wait_horizon(BASE_T + 98 * STEP, versions=("blue", "green"))
    assert env.cli("switch", "--route", env.route, "--to", "green", "--at", "auto",
                   "--margin", "1s") == 0
    boundary = _boundary(env)
    env.wait_for("status of epoch 2", lambda: any(
        s.get("epoch") == 2 and s["event"] == "status" for s in env.status_messages()))
    router.stop()
    # The compacted control topic now holds only a bad record for the route.
    from testground.brokers import create_topics

    compacted = f"{env.control}-compacted"
    create_topics(bootstrap, {compacted: 1}, compacted=[compacted])
    env.control = compacted
    env.config = env.write_config("router2.yaml", control_topic=compacted)
    env.publish_raw_plan(b'{"route": "' + env.route.encode() + b'", "epoch": 3}')
    router = RouterProcess(env, name="w2")
    try:
        router.wait_started()
        blue.emit(events(100, 300))
        green.emit(events(100, 300))
        evs = events(0, 300)
        env.wait_output(len(evs))
        check_output(env, evs, lambda p, t: "green" if t >= boundary else "blue")
        assert "route " + env.route + ": rejected plan" in router.text()
    finally:
        router.stop()


def test_plan_validate_and_show(env: Env, router: RouterProcess, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert env.cli_plan("show", "--route", env.route) == 1
    assert env.cli_plan("init", "--route", env.route, "--primary", "blue") == 0
    capsys.readouterr()
    assert env.cli_plan("show", "--route", env.route, "--json") == 0
    assert json.loads(capsys.readouterr().out)["segments"] == [
        {"from_event_time": None, "primary": "blue"}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"route": "x", "epoch": 1, "segments": [
        {"from_event_time": None, "primary": "blue"}, {"from_event_time": 5,
                                                        "primary": "blue"}]}))
    from cutover.cli import main

    assert main(["plan", "validate", str(bad)]) == 1
    assert "repeats primary" in capsys.readouterr().err
    # A record with no headers at all still reaches the dead-letter topic, not silence.
    hdrs = TaggedRecord(version="blue", event_time=BASE_T).to_headers()
    assert hdrs
