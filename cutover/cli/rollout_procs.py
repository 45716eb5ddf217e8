"""The operator's commands as processes, for ``cutover rollout``.

The new version's start command runs in a session of its own, so it outlives the rollout
(a rollout killed with ``kill -9`` leaves the job running, and ``--resume`` picks it up) and a
stop ends the whole group (a launcher, its JVM and its Python workers). A later run finds the
process again by pid and by its start time in ``/proc`` (a reused pid has another), on the host
that started it. Stop commands run to completion with a time limit; their output, like the
start command's, goes to a log file per command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from cutover.plan import utcnow
from cutover.rollout.events import NewProcess, ProcState
from cutover.rollout.journal import ProcessRef

STOP_GRACE_S = 30.0         # SIGTERM to SIGKILL
COMMAND_TIMEOUT_S = 300.0   # a stop command that takes longer is ended (exit code 124)


def host() -> str:
    return socket.gethostname()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def pid_alive(pid: int, ticks: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, when ``ticks`` is given, is the process that
    started then."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] == "Z":
        return False
    return ticks is None or int(fields[19]) == ticks


class Commands:
    """Runs and watches the commands of one rollout; logs go to ``log_dir``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def _log(self, name: str) -> Path:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self.log_dir / f"{name}.log"

    def start(self, command: str, name: str) -> ProcessRef:
        """Launch ``command`` with the shell in a new session; raise OSError if it cannot."""
        log = self._log(name)
        with log.open("ab") as out:
            out.write(f"\n--- {utcnow().isoformat()} $ {command}\n".encode())
            out.flush()
            proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.children[proc.pid] = proc
        return ProcessRef(pid=proc.pid, host=host(), start_ticks=start_ticks(proc.pid),
                          log=str(log), started_at=utcnow())

    def state(self, ref: ProcessRef | None) -> NewProcess:
        if ref is None:
            return NewProcess(state=ProcState.UNKNOWN)
        child = self.children.get(ref.pid)
        if child is not None:
            code = child.poll()
            return NewProcess(state=ProcState.ALIVE if code is None else ProcState.GONE,
                              exit_code=code)
        if ref.host != host():
            return NewProcess(state=ProcState.UNKNOWN)
        alive = pid_alive(ref.pid, ref.start_ticks)
        return NewProcess(state=ProcState.ALIVE if alive else ProcState.GONE)

    def stop(self, ref: ProcessRef | None, stop_command: str | None, name: str) -> None:
        """Stop the started process: its stop command if there is one, then (on this host)
        SIGTERM to its process group and SIGKILL after a grace period."""
        if stop_command:
            self.run(stop_command, name)
        if ref is None or ref.host != host():
            return
        if self.state(ref).state is not ProcState.ALIVE and not self._group_left(ref.pid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ref.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and self._group_left(ref.pid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(ref.pid, signal.SIGKILL)
        child = self.children.pop(ref.pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(10)

    def _group_left(self, pgid: int) -> bool:
        """Whether any process of the group is left (reaping our own child first)."""
        child = self.children.get(pgid)
        if child is not None:
            child.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def run(self, command: str, name: str, timeout: float = COMMAND_TIMEOUT_S) -> int:
        """Run ``command`` with the shell to completion; its exit code (124 on timeout)."""
        log = self._log(name)
        with log.open("ab") as out:
            out.write(f"\n--- {utcnow().isoformat()} $ {command}\n".encode())
            out.flush()
            proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
                out.write(f"--- ended after {timeout:.0f}s\n".encode())
                return 124
