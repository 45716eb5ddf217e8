"""What every broker the project starts shares: its error, a free loopback port, and waiting
until a broker answers (the demo's Tansu, the tests' Apache Kafka, an external Kafka)."""

from __future__ import annotations

import socket
import subprocess
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


class BrokerError(RuntimeError):
    """A broker could not be started, did not answer, or lacks a topic a caller needs."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_ready(
    bootstrap: str, timeout: float = 20.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until the broker answers a metadata request."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"broker exited with code {process.returncode} while starting")
        try:
            AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f}s ({last})")


