"""Apache Kafka in KRaft mode, started on loopback: the reference broker of the test ground.

``make jvm`` copies the ``kafka_2.13`` jars and their runtime dependencies from Maven Central
into ``.cache/jvm/kafka`` (``CUTOVER_KAFKA_LIBS`` points elsewhere: ``make jvm-kafka39`` fetches
Apache Kafka 3.9 into ``.cache/jvm/kafka-3.9`` for the 3.x runs). Each node runs as one JVM
in combined mode (``process.roles=broker,controller``) with a static controller quorum, so a
single broker and a three-broker cluster (replication 3, ``min.insync.replicas=2``) are the
same code. Heaps are small (a 2-core, 24 GiB machine runs three brokers next to Spark JVMs).

By default every listener is PLAINTEXT and open; a :class:`NodeSecurity` (the security
suite's, :mod:`testground.secure_kafka`) replaces the listeners with TLS and SASL ones and switches
the authorizer on.

A node that fails to start raises :class:`BrokerError` with the last lines of its log instead
of hanging. :meth:`KafkaCluster.kill` and :meth:`KafkaCluster.restart` give the conformance
grid its "broker killed" failure: ``kill -9`` of one node, and the same node back on the same
ports and data directory; :meth:`KafkaCluster.freeze` and :meth:`KafkaCluster.thaw` its "broker
frozen" one (SIGSTOP, SIGCONT). :meth:`KafkaCluster.active_controller` and
:meth:`KafkaCluster.coordinator` name the node a "controller killed" or "group coordinator
killed" fault must hit.

Two profiles of broker settings. The test profile (the default) shortens what only makes
tests slow: no initial rebalance delay, one-second minimum sessions, a killed node noticed in
~3 s, small internal topics. ``broker_defaults=True`` runs Apache Kafka as a new user would:
its own defaults everywhere except replication 3 and ``min.insync.replicas`` 2 (the cluster's
point), listeners and data directories (loopback, per node) and no auto-created topics (every
test creates its topics, as production should). The fault cells and the chaos soak use it:
failover times measured under test settings would promise what a real cluster does not do.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cutover.child_process import dies_with_parent
from cutover.demo_broker import free_port
from cutover.topic_admin import BrokerError

KAFKA_LIBS_ENV = "CUTOVER_KAFKA_LIBS"
KAFKA_HEAP_ENV = "CUTOVER_KAFKA_HEAP"
_REPO_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "jvm" / "kafka"

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""
# Kafka 3.x logs through reload4j (log4j 1): the same console log, in its format.
_LOG4J1 = """\
log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""


def kafka_libs() -> Path:
    """The folder of Kafka's jars; a sentence on how to get them when it is missing."""
    libs = Path(os.environ.get(KAFKA_LIBS_ENV) or _REPO_CACHE)
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(
            f"no Apache Kafka jars in {libs}: run `make jvm` (Maven fetches them once), "
            f"or set {KAFKA_LIBS_ENV} to a folder holding kafka_2.13-*.jar and its dependencies"
        )
    return libs


def kafka_version() -> str:
    jar = next(kafka_libs().glob("kafka_2.13-*.jar"))
    return jar.stem.removeprefix("kafka_2.13-")


@dataclass
class KafkaNode:
    """One combined broker+controller JVM: its ports, data directory and process."""

    node_id: int
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class NodeSecurity(Protocol):
    """Listeners, TLS, SASL and authorizer settings for a secured cluster
    (:mod:`testground.secure_kafka`); without one, every listener is PLAINTEXT and open."""

    def node_properties(self, node: KafkaNode, voters: str) -> dict[str, Any]:
        """Properties that replace the PLAINTEXT listeners of ``node``'s server.properties."""
        ...

    def admin_conf(self, node: KafkaNode) -> dict[str, Any]:
        """A client configuration that reaches ``node`` as a super user (readiness probes)."""
        ...


@dataclass
class KafkaCluster:
    """``size`` Apache Kafka nodes on loopback; a context manager that always cleans up."""

    size: int = 1
    root: Path | None = None
    security: NodeSecurity | None = None
    broker_defaults: bool = False
    nodes: list[KafkaNode] = field(default_factory=list)
    cluster_id: str = field(
        default_factory=lambda: base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    )
    _own_root: bool = False

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def replication(self) -> int:
        return min(3, self.size)

    def start(self, timeout: float = 90.0) -> KafkaCluster:
        if self.broker_defaults and self.size < 3:
            raise BrokerError(
                f"broker defaults need three nodes or more (the internal topics' default "
                f"replication is 3); asked for {self.size}: use size=3 or the test profile")
        libs = kafka_libs()
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="cutover-kafka-"))
            self._own_root = True
        self.nodes = [KafkaNode(i + 1) for i in range(self.size)]
        (self.root / "log4j2.properties").write_text(_LOG4J2)
        (self.root / "log4j.properties").write_text(_LOG4J1)
        try:
            for node in self.nodes:
                self._write_config(node)
                self._format(libs, node)
            for node in self.nodes:
                self._launch(libs, node)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _node_dir(self, node: KafkaNode) -> Path:
        assert self.root is not None
        return self.root / f"node-{node.node_id}"

    def _write_config(self, node: KafkaNode) -> None:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        rf, isr = self.replication, 2 if self.size >= 3 else 1
        props: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self._node_dir(node) / "data",
            # Tests create every topic explicitly, as production should: an auto-created topic
            # would hide a missing create step.
            "auto.create.topics.enable": "false",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
        }
        if not self.broker_defaults:
            props.update(self._test_settings(rf, isr))
        if self.security is not None:
            props.update(self.security.node_properties(node, voters))
        path = self._node_dir(node) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @staticmethod
    def _test_settings(rf: int, isr: int) -> dict[str, Any]:
        """What the test profile changes from Apache Kafka's defaults (see the module doc)."""
        return {
            "num.partitions": 1,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
            "log.segment.bytes": 16 * 1024 * 1024,
            "group.consumer.min.session.timeout.ms": 1000,
            "group.min.session.timeout.ms": 1000,
            "unclean.leader.election.enable": "false",
            # A killed node is noticed in ~3 s instead of 9 (the "broker killed" grid cells).
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 3000,
        }

    def _java(self, libs: Path, main: str, *args: str, heap: str) -> list[str]:
        assert self.root is not None
        return [
            "java", f"-Xmx{heap}", "-Xms64m", "-XX:+UseSerialGC", "-Xss1m",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.root / 'log4j.properties'}",
            "-cp", f"{libs}/*", main, *args,
        ]

    def _format(self, libs: Path, node: KafkaNode) -> None:
        config = self._node_dir(node) / "server.properties"
        cmd = self._java(libs, "kafka.tools.StorageTool", "format",
                         f"--cluster-id={self.cluster_id}",  # an id may start with "-"
                         "-c", str(config), "--ignore-formatted", heap="256m")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"formatting Kafka node {node.node_id} failed:\n{tail}")

    def admin_conf(self, node: KafkaNode) -> dict[str, Any]:
        """How a probe reaches ``node``: its PLAINTEXT listener, or as the secured cluster's
        super user."""
        if self.security is not None:
            return self.security.admin_conf(node)
        return {"bootstrap.servers": node.address}

    def log_path(self, node: KafkaNode) -> Path:
        return self._node_dir(node) / "server.log"

    def _launch(self, libs: Path, node: KafkaNode) -> None:
        heap = os.environ.get(KAFKA_HEAP_ENV) or ("768m" if self.size == 1 else "512m")
        cmd = self._java(libs, "kafka.Kafka", str(self._node_dir(node) / "server.properties"),
                         heap=heap)
        with self.log_path(node).open("ab") as log:
            node.process = subprocess.Popen(
                dies_with_parent(cmd), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def log_tail(self, node: KafkaNode, lines: int = 25) -> str:
        try:
            text = self.log_path(node).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def _wait_ready(self, timeout: float, nodes: list[KafkaNode] | None = None) -> None:
        """Until each node answers metadata itself and sees every node registered."""
        deadline = time.monotonic() + timeout
        want = {n.node_id for n in self.nodes if n.process is not None}
        pending = list(nodes or self.nodes)
        last = "no answer"
        while pending and time.monotonic() < deadline:
            for node in self.nodes:
                if node.process is not None and node.process.poll() is not None:
                    raise BrokerError(
                        f"Kafka node {node.node_id} exited with code {node.process.returncode} "
                        f"while starting; last lines of {self.log_path(node)}:\n"
                        f"{self.log_tail(node)}"
                    )
            node = pending[0]
            try:
                admin = AdminClient({**self.admin_conf(node), "log_level": 0})
                meta = admin.list_topics(timeout=2.0)
                have = set(meta.brokers)
                if meta.orig_broker_id == node.node_id and want <= have:
                    pending.pop(0)
                    continue
                last = f"node {node.node_id} sees brokers {sorted(have)}, wants {sorted(want)}"
            except KafkaException as exc:
                last = f"node {node.node_id}: {exc}"
            time.sleep(0.2)
        if not pending:
            return
        tails = "\n".join(f"-- node {n.node_id}:\n{self.log_tail(n, 10)}" for n in self.nodes)
        raise BrokerError(
            f"Apache Kafka at {self.bootstrap} was not ready within {timeout:.0f}s ({last}); "
            f"last log lines:\n{tails}"
        )

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no Kafka node {node_id} in this cluster")

    def leader(self, topic: str, partition: int) -> int:
        """The node id that leads ``topic``/``partition`` now."""
        live = [n for n in self.nodes if n.process is not None]
        conf = {**self.admin_conf(live[0]),
                "bootstrap.servers": ",".join(self.admin_conf(n)["bootstrap.servers"]
                                              for n in live)}
        meta = AdminClient(conf).list_topics(topic, timeout=10)
        return int(meta.topics[topic].partitions[partition].leader)

    def kill(self, node_id: int) -> None:
        """``kill -9`` one node: no flush, no controlled shutdown."""
        node = self.node(node_id)
        proc, node.process = node.process, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def freeze(self, node_id: int) -> None:
        """SIGSTOP one node: alive to the kernel (its sockets stay open), silent to everyone."""
        self._signal(node_id, signal.SIGSTOP)

    def thaw(self, node_id: int) -> None:
        """SIGCONT a frozen node: it goes on where it stopped."""
        self._signal(node_id, signal.SIGCONT)

    def _signal(self, node_id: int, sig: signal.Signals) -> None:
        proc = self.node(node_id).process
        if proc is None or proc.poll() is not None:
            raise BrokerError(f"Kafka node {node_id} is not running")
        os.killpg(proc.pid, sig)

    def active_controller(self) -> int:
        """The node id of the KRaft quorum's leader (the active controller).

        Each voter writes the leader it knows to ``__cluster_metadata-0/quorum-state`` when
        an election ends; the newest epoch among the nodes is the current leader. (A broker's
        DescribeCluster answer names a random broker as "controller" in KRaft mode, so the
        admin API cannot say.)"""
        best: tuple[int, int] | None = None
        for n in self.nodes:
            path = self._node_dir(n) / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        if best is None:
            raise BrokerError("no node of the cluster has recorded a quorum leader yet")
        return best[0]

    def coordinator(self, group_id: str, timeout: float = 60.0) -> int:
        """The node id of ``group_id``'s group coordinator (asked again until ``timeout``: a
        loaded cluster may not answer the first time)."""
        live = [n for n in self.nodes if n.process is not None]
        conf = {**self.admin_conf(live[0]), "log_level": 0,
                "bootstrap.servers": ",".join(self.admin_conf(n)["bootstrap.servers"]
                                              for n in live)}
        admin = AdminClient(conf)
        deadline = time.monotonic() + timeout
        while True:
            futures = admin.describe_consumer_groups([group_id], request_timeout=15)
            try:
                return int(futures[group_id].result(timeout=20).coordinator.id)
            except Exception as exc:  # KafkaException or a timeout: ask again
                if time.monotonic() > deadline:
                    raise BrokerError(f"the coordinator of group {group_id!r} is unknown: "
                                      f"{exc!r}") from exc
                time.sleep(1.0)

    def restart(self, node_id: int, timeout: float = 90.0) -> None:
        """Bring a killed node back on its ports and data, and wait until it is registered."""
        node = self.node(node_id)
        if node.process is not None:
            raise BrokerError(f"Kafka node {node_id} is running; kill it first")
        self._launch(kafka_libs(), node)
        self._wait_ready(timeout, [node])

    def stop(self) -> None:
        """Kill every node and delete what it wrote (the data is thrown away, so no flush)."""
        for n in self.nodes:
            self.kill(n.node_id)
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start() if not self.nodes else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
