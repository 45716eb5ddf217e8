"""Partitions the group gave to no member are given out again.

How a group comes to hold partitions nobody owns (the classic group protocol, cooperative
assignment, static membership): a cooperative rebalance moves a partition in two rounds. The
first takes it from its owner; the owner's rejoin, once it has given the partition up, starts
the second, which gives it to its new owner. A static member replaced by its own instance id
between the two rounds (the data consumer rebuilt after its session was fenced:
router.worker.datapath; a restarted worker) is given its stored assignment back without a
rebalance (a static member rejoining a stable group, KIP-345), and the rejoin the second round
waited for never comes. The group then stays stable with those partitions assigned to no member
until something else makes it rebalance, which may be never. No worker owns them, so no
worker's stall watchdog sees them (router.worker.watchdog), and their output stops.

What the worker does about it: a thread asks the group's coordinator who holds what
(:data:`LOOK_EVERY_S`). Partitions of the worker's own subscription that no member of a stable
group it belongs to holds, at every look for :data:`GRACE_S` (a healthy second round follows
the first as soon as the owner's next consume serves its revocation), are given out by making
the group rebalance: a member joins for a moment and leaves (:func:`nudge`). It subscribes only
to the checkpoint topic, which no worker consumes through the group, so it takes no raw
partition. A nudge that did not help is tried again after a doubling wait, at most
:data:`MAX_WAIT_S` apart.

A coordinator that does not answer is asked again at the next look: a frozen or moving
coordinator is when members get replaced. Only a broker that has never answered the question
is asked less and less often.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from router.base.metrics import family_header

log = logging.getLogger("cutover.router")

# How often the group's coordinator is asked who holds what.
LOOK_EVERY_S = 1.0
# How long partitions must stay held by no member before the group is made to rebalance.
GRACE_S = 4.0
# The longest wait between two nudges while partitions stay unheld.
MAX_WAIT_S = 120.0
# How long the group's coordinator is given to answer; how long a nudge waits for its join.
ASK_TIMEOUT_S = 5.0
JOIN_TIMEOUT_S = 30.0

RawPartition = tuple[str, int]


@dataclass(frozen=True)
class GroupView:
    """What the group's coordinator answered: whether the group is stable, its members' ids,
    and the partitions assigned to one of them."""

    stable: bool
    members: frozenset[str]
    held: frozenset[RawPartition]

    @classmethod
    def of(cls, group: ConsumerGroupDescription) -> GroupView:
        return cls(stable=group.state == ConsumerGroupState.STABLE,
                   members=frozenset(m.member_id for m in group.members),
                   held=frozenset((tp.topic, tp.partition) for m in group.members
                                  for tp in m.assignment.topic_partitions))


def unheld(view: GroupView, subscribed: Mapping[str, int], me: str | None) -> frozenset[
        RawPartition]:
    """The partitions of ``subscribed`` (topic -> partition count) that no member holds, in a
    stable group of which ``me`` (this worker's member id) is a member; empty otherwise (a
    rebalance in progress assigns them, and a group this worker is not in may not have its
    topics in any member's subscription)."""
    if not view.stable or me is None or me not in view.members:
        return frozenset()
    return frozenset((t, p) for t, n in subscribed.items() for p in range(n)) - view.held


@dataclass
class OrphanClock:
    """When to nudge: partitions unheld at every look for ``grace_s``; after a nudge, the
    next waits twice as long (at most ``max_wait_s``) while some stay unheld, and the wait
    starts again from ``grace_s`` once none is."""

    grace_s: float = GRACE_S
    max_wait_s: float = MAX_WAIT_S
    since: float | None = None
    wait_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.wait_s = self.grace_s

    def seen(self, orphans: frozenset[RawPartition], now: float) -> bool:
        """One look's answer; True when the group is to be made to rebalance now."""
        if not orphans:
            self.since = None
            self.wait_s = self.grace_s
            return False
        if self.since is None:
            self.since = now
            return False
        if now - self.since < self.wait_s:
            return False
        self.since = now
        self.wait_s = min(self.wait_s * 2, self.max_wait_s)
        return True


def nudge(conf: dict[str, Any], topic: str, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Make the group of ``conf`` rebalance: a member without an instance id joins it,
    subscribed to ``topic`` only, and leaves once it was given its assignment (or after
    ``timeout_s``: the rebalance goes on without it). True if it joined."""
    consumer = Consumer({k: v for k, v in conf.items() if k != "group.instance.id"})
    joined = False
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while not joined and time.monotonic() < deadline:
            consumer.poll(0.1)
            joined = bool(consumer.assignment())
    finally:
        consumer.close()
    return joined


class OrphanWatch:
    """The thread that looks for partitions the group gave to no member, and gives them out
    (the module's docstring says how). ``subscribed``: the data consumer's topics and their
    partition counts; ``me``: the data consumer's member id as the data thread last noted it
    (None while it has none)."""

    def __init__(self, admin_conf: dict[str, Any], consumer_conf: dict[str, Any],
                 nudge_topic: str, subscribed: Mapping[str, int],
                 me: Callable[[], str | None], stop: threading.Event,
                 clock: OrphanClock | None = None) -> None:
        self.admin_conf = admin_conf
        self.consumer_conf = consumer_conf
        self.group_id: str = consumer_conf["group.id"]
        self.nudge_topic = nudge_topic
        self.subscribed = subscribed
        self.me = me
        self.stop = stop
        self.clock = clock or OrphanClock()
        self.unheld: frozenset[RawPartition] = frozenset()
        self.nudges = 0
        self.thread = threading.Thread(target=self._run, name="cutover-orphans", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        admin = AdminClient(self.admin_conf)
        every, answered, failing = LOOK_EVERY_S, False, False
        while not self.stop.wait(every):
            try:
                group = admin.describe_consumer_groups(
                    [self.group_id], request_timeout=ASK_TIMEOUT_S)[self.group_id].result(
                        ASK_TIMEOUT_S)
            except (KafkaException, TimeoutError) as exc:
                if not failing:
                    log.info("group %s: who holds which partition was not answered (%r); "
                             "asking again", self.group_id, exc)
                failing = True
                # A broker that never answered DescribeGroups (the demo's embedded broker) is
                # asked less and less often. One that did is failing now (a coordinator frozen
                # or moving), which is when partitions come to be assigned to no member: it is
                # asked every look, each request bounded by ASK_TIMEOUT_S.
                if not answered:
                    every = min(every * 2, MAX_WAIT_S)
                continue
            every, answered, failing = LOOK_EVERY_S, True, False
            self.look(GroupView.of(group), time.monotonic())

    def look(self, view: GroupView, now: float) -> None:
        """One answer of the group's coordinator: note the unheld partitions, and nudge when
        the clock says so."""
        self.unheld = unheld(view, self.subscribed, self.me())
        if not self.clock.seen(self.unheld, now):
            return
        log.warning("group %s: partitions %s are assigned to no member (a cooperative "
                    "rebalance left unfinished when a member was replaced by its own instance "
                    "id); making the group rebalance to give them out", self.group_id,
                    sorted(f"{t}:{p}" for t, p in self.unheld))
        self.nudges += 1
        try:
            joined = nudge(self.consumer_conf, self.nudge_topic)
        except KafkaException as exc:
            log.warning("group %s: the rebalance could not be started (%s); trying again",
                        self.group_id, exc)
            return
        if not joined:
            log.warning("group %s: the member that starts the rebalance was not given its "
                        "assignment in %.0fs; the rebalance goes on without it", self.group_id,
                        JOIN_TIMEOUT_S)

    def prometheus(self) -> str:
        """The watch's metrics, declared with the worker's others (router.base.metrics)."""
        lines: list[str] = []
        for name, value in (("group_unheld_partitions", len(self.unheld)),
                            ("group_nudges_total", self.nudges)):
            lines.extend(family_header(name))
            lines.append(f"cutover_{name} {value}")
        return "\n".join(lines) + "\n"
