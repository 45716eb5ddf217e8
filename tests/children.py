"""Child processes for the end-to-end suites (integration, conformance, benchmarks): each runs
in its own process group, so that a kill takes its children with it, and logs to a file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


class Child:
    """A child process in its own process group, its output appended to ``log``."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.log = log
        # The suite's own plan key (if any) is not the child's: a test that wants one says so.
        child_env = {k: v for k, v in os.environ.items() if k != "CUTOVER_PLAN_KEY"}
        child_env.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        with log.open("ab") as out:
            self.proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=child_env, cwd=cwd,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for_line(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if not self.alive():
                raise AssertionError(f"{self.proc.args[:3]} exited {self.proc.returncode}:\n"
                                     f"{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} within {timeout:.0f}s:\n{self.tail()}")

    def stop(self, grace: float = 30.0) -> int:
        """SIGTERM to the group, SIGKILL after ``grace`` seconds; the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9 of the whole group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


class RouterChild(Child):
    """``cutover router --config FILE`` (a kill is a real kill -9)."""

    def __init__(self, config: Path, log: Path, extra_env: dict[str, str] | None = None,
                 args: Sequence[str] = ()) -> None:
        super().__init__([str(VENV_BIN / "cutover"), "router", "--config", str(config), *args],
                         log, env=extra_env)

    def wait_started(self, timeout: float = 60.0) -> None:
        """Until the worker has taken (or, in a group, released) partitions."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if "took over partitions" in text or "released partitions" in text:
                return
            if not self.alive():
                raise AssertionError(f"router exited {self.proc.returncode}:\n{self.tail(80)}")
            time.sleep(0.2)
        raise AssertionError(f"router did not take partitions in {timeout:.0f}s:\n"
                             f"{self.tail(80)}")

    kill9 = Child.kill

    def assert_alive(self) -> None:
        assert self.alive(), f"router died:\n{self.text()[-5000:]}"
