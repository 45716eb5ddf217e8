"""The promote gate, pause and resume, ``rollout status`` and the events of a real
``cutover rollout`` (router worker, emulated tagged jobs, the suite's broker), steered from
another process as an operator on another host would."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.children import VENV_BIN
from tests.rollout.rollout_harness import RolloutRoute, check_output, started_route

pytestmark = pytest.mark.broker


@pytest.fixture
def route(bootstrap: str, tmp_path: Path) -> Iterator[RolloutRoute]:
    with started_route(bootstrap, tmp_path) as r:
        yield r


class Hook:
    """A webhook that refuses its first post, then keeps what it is sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if hook.refused == 0:
                    hook.refused += 1
                    self.send_error(503)
                    return
                hook.bodies.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def cli(route: RolloutRoute, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "cutover"), "rollout", *argv, "--config",
                           str(route.env.config), "--route", route.env.route],
                          capture_output=True, text=True, timeout=60)


def status(route: RolloutRoute) -> dict[str, Any]:
    done = cli(route, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def wait_for(route: RolloutRoute, what: str, ok: Any, run: Any,
             timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = cli(route, "status", "--json")
        if done.returncode == 0 and ok(json.loads(done.stdout)):
            return json.loads(done.stdout)  # type: ignore[no-any-return]
        assert done.returncode in (0, 2), done.stderr   # 2: not journaled yet
        assert run.alive(), run.tail(40)
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout:.0f}s: {done.stdout}{done.stderr}\n"
                         f"{run.tail(40)}")


def test_a_rollout_waits_at_its_gate_holds_while_paused_and_goes_on_when_promoted_and_resumed(
        route: RolloutRoute, tmp_path: Path) -> None:
    hook = Hook()
    events = tmp_path / "events.jsonl"
    run = route.rollout("--to", "green", "--start", route.job_command("green"),
                        "--stop-old", route.stop_blue_command(), "--catch-up-lag", "2s",
                        "--margin", "2s", "--deadline", "120s", "--soak", "2s",
                        "--pause-before", "switch", "--events", str(events),
                        "--notify", hook.url)
    waiting = wait_for(route, "the switch gate", lambda r: r["waiting_at"] == "switch", run)
    assert waiting["phase"] == "CATCHING_UP" and waiting["switch_epoch"] is None
    shown = cli(route, "status")
    assert "gates: switch: WAITING" in shown.stdout, shown.stdout

    paused = cli(route, "pause")
    assert paused.returncode == 0 and "took it" in paused.stdout, paused.stdout + paused.stderr
    promoted = cli(route, "promote")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    time.sleep(3)
    held = status(route)
    assert held["phase"] == "CATCHING_UP" and held["promoted"] == ["switch"], held
    assert held["paused_by"] and held["switch_epoch"] is None

    assert cli(route, "resume").returncode == 0
    assert route.wait_exit(run, 120) == 0, run.tail(40)
    watched = cli(route, "status", "--watch")
    assert watched.returncode == 0 and "DONE" in watched.stdout

    lines = [json.loads(x) for x in events.read_text().splitlines()]
    changes = [(e["change"], e["phase"]) for e in lines]
    assert ("waiting", "CATCHING_UP") in changes and ("paused", "CATCHING_UP") in changes
    assert ("promoted", "CATCHING_UP") in changes and ("resumed", "CATCHING_UP") in changes
    assert [p for c, p in changes if c == "phase"] == [
        "CATCHING_UP", "SWITCHING", "DRAINING", "TEARING_DOWN", "SOAKING", "DONE"]
    assert hook.refused == 1 and hook.bodies == lines, "the webhook did not get every event"
    boundary = status(route)["switch_boundary"]
    versions = check_output(route, lambda p, t: "green" if t >= boundary else "blue")
    assert versions["blue"] > 0 and versions["green"] > 0
