"""`cutover demo` end to end, as a new user runs it: real broker, real Spark, real router.

Slow (a few minutes, two Spark jobs): run with `make test-all` or `pytest -m slow tests/demo`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CUTOVER = str(Path(sys.executable).parent / "cutover")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children started in new sessions included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_demo_runs_a_rollout_and_a_rollback(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run([CUTOVER, "demo", "--out", str(out), "--run-on", "10"],
                          capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, f"demo failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert "Traceback" not in done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["expected"] > 50
    assert summary["lost"] == 0 and summary["duplicated"] == 0, summary["lost_windows"]
    assert summary["wrong_version"] == 0 and summary["wrong_value"] == 0
    forwarded = summary["forwarded"]
    assert forwarded.get("blue", 0) > 0 and forwarded.get("green", 0) > 0
    first, second = summary["rollouts"]
    assert (first["to"], first["phase"]) == ("green", "DONE")
    # green got 10% of the customers first, and the comparison at that step saw only theirs
    assert [p for p, _ in first["phases"]].count("CANARY") == 1
    assert summary["canary_from"] is not None and summary["canary_share"] == 0.1
    compared = first["compared"]   # green fixes a bug that touches a few percent of windows
    total = sum(compared.values())
    assert compared["equal"] > 0 and compared["different"] <= 0.10 * total, compared
    assert total < 0.5 * summary["windows"]
    assert summary["windows_with_a_reviewed_order"] < 0.05 * summary["windows"]
    assert (second["to"], second["phase"]) == ("v3", "ROLLED_BACK")
    assert second["boundary"] is not None, "v3 was rolled back before the switch"
    assert summary["green_again_from"] and forwarded.get("v3", 0) > 0
    assert all(g is not None for g in summary["largest_gap_steady_s"])
    png = out / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    for step in ("cutover rollout --route totals --to green", "by key share (10%, 100%",
                 "CANARY started: step 1/2 (10% of the keys)", "the canary's 10% of the keys",
                 "SWITCHING started: step 2/2 (100% of the keys)",
                 "orders ", " -> ", "within --max-diff 10%", "what to look at",
                 "CLEAR_TO_TEARDOWN", "cutover rollout --route totals --to v3",
                 "the demo makes it hang", "ROLLING_BACK started", "lost 0, duplicated 0",
                 "steady running (one version, no rollout)", str(png)):
        assert step in done.stdout + done.stderr, f"the demo did not print {step!r}"


def test_ctrl_c_stops_everything_the_demo_started(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    log = (tmp_path / "stdout.log").open("w+")
    demo = subprocess.Popen([CUTOVER, "demo", "--out", str(out)], stdout=log,
                            stderr=subprocess.STDOUT, text=True)
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while "blue (windowed_totals.py) started" not in Path(log.name).read_text():
            assert demo.poll() is None, Path(log.name).read_text()
            assert time.monotonic() < deadline, "the demo never started blue"
            time.sleep(1)
        time.sleep(5)
        started = descendants(demo.pid)
        assert len(started) >= 3, f"expected broker, router and blue below the demo: {started}"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(90) == 130
        deadline = time.monotonic() + 30
        while (left := {p for p in started if alive(p)}) and time.monotonic() < deadline:
            time.sleep(0.5)
        cmdlines = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                    for p in left if alive(p)}
        assert not left, f"processes left running after Ctrl-C: {cmdlines}"
        text = Path(log.name).read_text()
        assert "interrupted: stopping everything the demo started" in text
        assert "Traceback" not in text
    finally:
        if demo.poll() is None:
            os.kill(demo.pid, signal.SIGKILL)
        for p in started | descendants(demo.pid):
            if alive(p):
                os.kill(p, signal.SIGKILL)
