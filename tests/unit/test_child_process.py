"""A broker started for the tests or the demo dies with the process that started it
(cutover.child_process): a test process killed by a signal runs no teardown."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

STARTER = """
import subprocess, sys, time
from cutover.child_process import dies_with_parent
child = subprocess.Popen(dies_with_parent(["sleep", "120"]), start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running (not gone, and not a zombie nobody reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


@pytest.mark.skipif(shutil.which("setpriv") is None or not Path("/proc").is_dir(),
                    reason="setpriv (util-linux) and /proc are Linux's")
def test_a_child_started_so_dies_when_its_starter_is_killed() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE,
                               text=True)
    assert starter.stdout is not None
    pid = int(starter.stdout.readline())
    try:
        deadline = time.monotonic() + 10  # setpriv has asked for the signal once sleep runs
        while not _cmdline(pid).startswith(b"sleep") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _alive(pid)
        starter.kill()   # as a segfault or kill -9 would: no teardown runs
        starter.wait(10)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the child outlived the process that started it"
    finally:
        if _alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
