"""The topics a route needs, with the configs each must have: a function of the settings.

Per-partition topics (output, dead letter, shadow) have the raw topic's partition count: raw
partition ``p`` feeds output partition ``p``. The control, status and checkpoint topics are
compacted: the newest record per key is the state (a route's plan, a worker's status, a
partition's checkpoint). The output keeps records at least as long as the dedup retention,
since a worker that takes a partition over reads it back that far.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from cutover.settings import RouterSettings, RouteSettings
from cutover.topic_configs import STATE_TOPIC_CONFIG


class TopicRole(StrEnum):
    RAW = "raw"
    OUTPUT = "output"
    DEAD_LETTER = "dead letter"
    SHADOW = "shadow"
    CONTROL = "control"
    STATUS = "status"
    CHECKPOINTS = "checkpoints"


class TopicSpec(BaseModel):
    """One topic as the route needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: TopicRole
    partitions: int
    compacted: bool = False
    min_retention_ms: int | None = None   # retention.ms must be -1 or at least this

    @property
    def config(self) -> dict[str, str]:
        """The configs set when the topic is created."""
        return dict(STATE_TOPIC_CONFIG) if self.compacted else {}


def route_topics(settings: RouterSettings, route: RouteSettings,
                 partitions: int) -> list[TopicSpec]:
    """Every topic ``route`` uses, raw topics first, each named once."""
    specs = [TopicSpec(name=t, role=TopicRole.RAW, partitions=partitions)
             for t in route.inputs]
    specs.append(TopicSpec(name=route.output, role=TopicRole.OUTPUT, partitions=partitions,
                           min_retention_ms=route.dedup.retention_ms))
    specs.append(TopicSpec(name=route.dead_letter or f"{route.output}.dlq",
                           role=TopicRole.DEAD_LETTER, partitions=partitions))
    if route.shadow:
        specs.append(TopicSpec(name=route.shadow, role=TopicRole.SHADOW, partitions=partitions))
    for name, role in ((settings.control_topic, TopicRole.CONTROL),
                       (settings.status_topic, TopicRole.STATUS),
                       (settings.checkpoint_topic or f"{settings.group_id}.checkpoints",
                        TopicRole.CHECKPOINTS)):
        specs.append(TopicSpec(name=name, role=role, partitions=1, compacted=True))
    return specs


def topic_problem(spec: TopicSpec, partitions: int, config: dict[str, str] | None) -> str | None:
    """What is wrong with an existing topic for ``spec`` (None when it fits). ``config`` is
    the topic's configs when they could be read."""
    if spec.role is not TopicRole.CONTROL and spec.role is not TopicRole.STATUS \
            and spec.role is not TopicRole.CHECKPOINTS and partitions != spec.partitions:
        return (f"{spec.role.value} topic {spec.name} has {partitions} partitions, the raw "
                f"topic has {spec.partitions}: raw partition p feeds output partition p, so "
                f"they must match; add partitions with kafka-topics.sh --alter --topic "
                f"{spec.name} --partitions {spec.partitions} (or recreate it)")
    if config is None:
        return None
    if spec.compacted and "compact" not in config.get("cleanup.policy", ""):
        return (f"{spec.role.value} topic {spec.name} has cleanup.policy="
                f"{config.get('cleanup.policy', 'delete')}; it must be compacted (the newest "
                f"record per key is the state): kafka-configs.sh --alter --topic {spec.name} "
                "--add-config cleanup.policy=compact")
    if spec.min_retention_ms is not None:
        retention = int(config.get("retention.ms", "-1"))
        if retention != -1 and retention < spec.min_retention_ms:
            return (f"{spec.role.value} topic {spec.name} keeps records {retention} ms, less "
                    f"than dedup.retention_ms ({spec.min_retention_ms}): a worker taking a "
                    "partition over reads the output back that far; raise it with "
                    f"kafka-configs.sh --alter --topic {spec.name} --add-config "
                    f"retention.ms={spec.min_retention_ms}")
    return None
