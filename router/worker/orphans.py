"""No partition is left assigned to no member: a worker whose data consumer took a static
member's place makes the group rebalance once.

How a group comes to hold partitions nobody owns (the classic group protocol, cooperative
assignment, static membership): a cooperative rebalance moves a partition in two rounds. The
first takes it from its owner; the owner's rejoin, once it has given the partition up, starts
the second, which gives it to its new owner. A static member replaced by its own instance id
between the two rounds is given the instance's stored assignment without a rebalance (a static
member rejoining a stable group, KIP-345), and the rejoin the second round waited for never
comes. The group then stays stable with those partitions assigned to no member until something
else makes it rebalance, which may be never. No worker owns them, so no worker's stall watchdog
sees them (router.worker.watchdog), and their output stops.

A worker's data consumer takes its instance's place at every start (a restart after kill -9
included), at every rebuild (router.worker.datapath: a fenced session), and when librdkafka
rejoins after the session was lost (the partitions are reported lost). Each time, once the new
consumer has its first assignment, the worker makes the group rebalance (:class:`Nudger`): a
member without an instance id joins the group for a moment, subscribed to the checkpoint topic
only (no worker consumes it through the group, so it takes no raw partition), and leaves. A new
member always makes the group rebalance, and in that rebalance every member's owned partitions
are known, so the assignor gives out any that no member holds. With cooperative assignment the
partitions that stay with their owners keep flowing through it. The eager ``range`` assignment
has no second round, so it needs none. Nor does a worker whose first assignment holds every
partition of every raw topic (alone in its group): no partition is assigned to no member then,
and each rebalance of a nudge makes the batch whose commit meets it abort and replay (the commit
carries the group generation the rebalance ended: KIP-447).

Why not ask the coordinator who holds what and nudge only then: librdkafka's admin requests to
a group coordinator can abort the process when the coordinator fails under them
(confluentinc/librdkafka#4605), which is exactly when members are replaced.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException

from router.base.metrics import family_header

log = logging.getLogger("cutover.router")

# How long a nudge waits for its member's assignment (the rebalance's end) before it leaves.
JOIN_TIMEOUT_S = 30.0


def nudge(conf: dict[str, Any], topic: str, stop: threading.Event | None = None,
          timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Make the group of ``conf`` rebalance: a member without an instance id joins it,
    subscribed to ``topic`` only, and leaves once it was given its assignment (or after
    ``timeout_s``, or once ``stop`` is set: the rebalance goes on without it). True if it
    was given its assignment."""
    consumer = Consumer({k: v for k, v in conf.items() if k != "group.instance.id"})
    joined = False
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while (not joined and time.monotonic() < deadline
               and not (stop is not None and stop.is_set())):
            consumer.poll(0.1)
            joined = bool(consumer.assignment())
    finally:
        consumer.close()
    return joined


class Nudger:
    """Makes the group rebalance once after each time the worker's data consumer took its
    instance's place (the module's docstring says why), in a thread of its own, so that the
    data thread never waits for it. Asked again while a nudge runs, it nudges once more
    after it: the last replacement is always followed by a whole rebalance."""

    def __init__(self, consumer_conf: dict[str, Any], nudge_topic: str,
                 stop: threading.Event) -> None:
        self.consumer_conf = consumer_conf
        self.group_id: str = consumer_conf["group.id"]
        self.nudge_topic = nudge_topic
        self.stop = stop
        self.nudges = 0
        self._lock = threading.Lock()
        self._running = False
        self._again = False

    @property
    def running(self) -> bool:
        """A nudge is under way."""
        return self._running

    def replaced(self, why: str) -> None:
        """The data consumer took its instance's place and has its first assignment (``why``
        names the occasion, for the log)."""
        with self._lock:
            if self._running:
                self._again = True
                return
            self._running = True
        threading.Thread(target=self._run, args=(why,), name="cutover-nudge",
                         daemon=True).start()

    def _run(self, why: str) -> None:
        while True:
            self.nudges += 1
            log.info("group %s: the data consumer took its instance's place (%s); making the "
                     "group rebalance once, so that no partition stays assigned to no member",
                     self.group_id, why)
            try:
                if not nudge(self.consumer_conf, self.nudge_topic, self.stop):
                    log.warning("group %s: the member that makes the group rebalance was not "
                                "given its assignment in %.0fs; the rebalance goes on without "
                                "it", self.group_id, JOIN_TIMEOUT_S)
            except KafkaException as exc:
                log.warning("group %s: the rebalance could not be started (%s)", self.group_id,
                            exc)
            with self._lock:
                if not self._again or self.stop.is_set():
                    self._running = False
                    return
                self._again = False
                why = "again meanwhile"

    def prometheus(self) -> str:
        """The nudges' count, declared with the worker's other metrics (router.base.metrics)."""
        return "\n".join([*family_header("group_nudges_total"),
                          f"cutover_group_nudges_total {self.nudges}"]) + "\n"
