"""The faults: what each one does to the cluster or the workers, and how long it lasts.

One fault at a time, each ending with everything back (a killed node restarted on its data, a
frozen process resumed, the pool at its size), so that the next fault meets a whole cluster.
Random choices (which worker, which partition, how long) come from the soak's seeded random
generator, so a seed replays the same sequence of faults.
"""

from __future__ import annotations

import os
import random
import signal
import time
from enum import StrEnum

from pydantic import BaseModel

from cutover.topic_admin import BrokerError
from testground.kafka_broker import KafkaCluster
from tests.soak.router_workers import Worker, WorkerPool


class FaultKind(StrEnum):
    WORKER_KILL = "worker kill -9"                   # restarted at once with its instance id
    WORKER_ZOMBIE = "worker frozen (zombie)"         # SIGSTOP 20-40 s: its partitions move
    WORKER_WIPED = "worker restart without state"    # kill -9, state directory deleted
    LEADER_KILL = "partition leader kill -9"         # of a raw or output partition
    CONTROLLER_KILL = "controller kill -9"           # the KRaft quorum's leader
    COORDINATOR_KILL = "group coordinator kill -9"   # of the router's consumer group
    BROKER_FREEZE = "broker frozen 20 s"             # SIGSTOP, SIGCONT
    WORKER_REPLACED = "worker added, one removed"    # a new instance id joins, another leaves


WHAT_IT_DOES: dict[FaultKind, str] = {
    FaultKind.WORKER_KILL: "kill -9 of a random worker, restarted at once with its instance id "
                           "and state directory (a supervisor's restart)",
    FaultKind.WORKER_ZOMBIE: "SIGSTOP of a random worker for 20-40 s (past its 6 s session: its "
                             "partitions move), then SIGCONT: it must give them up and rejoin",
    FaultKind.WORKER_WIPED: "kill -9 of a random worker, its state directory deleted, restarted "
                            "with its instance id (a pod rescheduled to another node)",
    FaultKind.LEADER_KILL: "kill -9 of the node leading a random raw or output partition, "
                           "restarted on its data 10-20 s later",
    FaultKind.CONTROLLER_KILL: "kill -9 of the KRaft quorum's leader, restarted 10-20 s later",
    FaultKind.COORDINATOR_KILL: "kill -9 of the router group's coordinator, restarted 10-20 s "
                                "later",
    FaultKind.BROKER_FREEZE: "SIGSTOP of a random node for 20 s, then SIGCONT",
    FaultKind.WORKER_REPLACED: "a worker with a new instance id joins; once it has taken "
                               "partitions a random other worker leaves (SIGTERM)",
}


class FaultRecord(BaseModel):
    """One fault as it happened: wall-clock start and end (seconds) and what it hit."""

    kind: FaultKind
    started: float
    ended: float
    target: str
    notes: list[str] = []
    # the machine's 1-minute load average as the fault started: gaps stretch on a loaded
    # machine, and the report says how loaded it was at each fault
    load: float | None = None


class FaultInjector:
    def __init__(self, cluster: KafkaCluster, pool: WorkerPool, partitions: int,
                 rng: random.Random, down_s: tuple[float, float] = (10.0, 20.0),
                 frozen_s: tuple[float, float] = (20.0, 40.0)) -> None:
        self.cluster = cluster
        self.pool = pool
        self.partitions = partitions
        self.rng = rng
        self.down_s = down_s        # a killed node stays down this long
        self.frozen_s = frozen_s    # a zombie worker stays frozen this long

    def inject(self, kind: FaultKind) -> FaultRecord:
        started = time.time()
        load = os.getloadavg()[0]
        notes: list[str] = []
        target = getattr(self, "_" + kind.name.lower())(notes)
        return FaultRecord(kind=kind, started=started, ended=time.time(), target=target,
                           notes=notes, load=round(load, 1))

    # -- workers ------------------------------------------------------------------------------

    def _victim(self) -> Worker:
        live = self.pool.live()
        if not live:
            raise RuntimeError("no live router worker to inject a fault into")
        return self.rng.choice(sorted(live, key=lambda w: w.instance_id))

    def _worker_kill(self, notes: list[str]) -> str:
        w = self._victim()
        self.pool.kill9(w)
        self.pool.start(w)
        self._started(w, notes)
        return w.instance_id

    def _worker_zombie(self, notes: list[str]) -> str:
        w = self._victim()
        frozen = round(self.rng.uniform(*self.frozen_s), 1)
        self.pool.signal(w, signal.SIGSTOP)
        time.sleep(frozen)
        self.pool.signal(w, signal.SIGCONT)
        return f"{w.instance_id} for {frozen} s"

    def _worker_wiped(self, notes: list[str]) -> str:
        w = self._victim()
        self.pool.kill9(w)
        self.pool.wipe_state(w)
        self.pool.start(w)
        self._started(w, notes)
        return w.instance_id

    def _worker_replaced(self, notes: list[str]) -> str:
        leaving = self._victim()
        joined = self.pool.add()
        self._started(joined, notes)
        leaving.retired = True
        rc = self.pool.stop(leaving)
        if rc not in (0, None):
            notes.append(f"{leaving.instance_id} exited {rc} on SIGTERM")
        return f"{joined.instance_id} joined, {leaving.instance_id} left"

    def _started(self, w: Worker, notes: list[str]) -> None:
        if not self.pool.wait_started(w, 60):
            notes.append(f"{w.instance_id} did not take partitions within 60 s of its start")

    # -- brokers ------------------------------------------------------------------------------

    def _roles(self, node: int, coordinator: bool = True, controller: bool = True) -> str:
        """What else ``node`` is, as a fault's target says: the group coordinator (a kill of
        it fences the group's static members) and the controller."""
        roles = []
        try:
            if coordinator and self.cluster.coordinator(self.pool.topics.group, 10) == node:
                roles.append("the group coordinator")
        except BrokerError:
            roles.append("group coordinator unknown")
        try:
            if controller and self.cluster.active_controller() == node:
                roles.append("the controller")
        except BrokerError:
            pass
        return f" (also {' and '.join(roles)})" if roles else ""

    def _kill_and_restart(self, node: int, notes: list[str]) -> None:
        self.cluster.kill(node)
        time.sleep(self.rng.uniform(*self.down_s))
        for attempt in (1, 2):
            try:
                self.cluster.restart(node)
                return
            except BrokerError as exc:
                notes.append(f"node {node} restart {attempt} failed: {str(exc)[:200]}")
                self.cluster.kill(node)

    def _leader_kill(self, notes: list[str]) -> str:
        t = self.pool.topics
        topic = self.rng.choice([t.raw, t.output])
        partition = self.rng.randrange(self.partitions)
        try:
            node = self.cluster.leader(topic, partition)
        except Exception as exc:  # the admin call itself failed: hit a node anyway
            node = self.rng.choice(self.cluster.nodes).node_id
            notes.append(f"leader unknown ({type(exc).__name__}); node {node} killed instead")
        roles = self._roles(node)
        self._kill_and_restart(node, notes)
        return f"node {node} (leader of {topic}:{partition}){roles}"

    def _controller_kill(self, notes: list[str]) -> str:
        node = self.cluster.active_controller()
        roles = self._roles(node, controller=False)
        self._kill_and_restart(node, notes)
        return f"node {node}{roles}"

    def _coordinator_kill(self, notes: list[str]) -> str:
        try:
            node = self.cluster.coordinator(self.pool.topics.group)
        except Exception as exc:
            node = self.rng.choice(self.cluster.nodes).node_id
            notes.append(f"coordinator unknown ({type(exc).__name__}); node {node} killed "
                         "instead")
        roles = self._roles(node, coordinator=False)
        self._kill_and_restart(node, notes)
        return f"node {node}{roles}"

    def _broker_freeze(self, notes: list[str]) -> str:
        node = self.rng.choice(self.cluster.nodes).node_id
        roles = self._roles(node)
        self.cluster.freeze(node)
        time.sleep(20.0)
        self.cluster.thaw(node)
        return f"node {node}{roles}"
