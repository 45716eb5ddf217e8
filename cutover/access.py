"""Who may do what on a route's topics: the table of docs/security.md, "Access control", as
data.

Whoever can write the control topic decides what every consumer of the output receives, so
each identity gets only the rights its work needs. The table is one function of the router
settings, :func:`required_rights`; ``cutover doctor`` checks a principal against it and the
security suite grants exactly these ACLs on a broker that refuses everything else.

Every row was found by running that part with nothing but the rows granted (tests/security):

* the **router** reads the control, raw and status topics (the status topic holds the last good
  plan for a restart), reads and writes the output (it reads it back when it takes over a
  partition) and the checkpoint topic, writes the dead-letter, shadow and status topics, and
  joins its consumer group; where transactions are on (Apache Kafka) it writes with the
  transactional ids ``<group_id>.<route>.<partition>`` (one prefix ACL). Its other consumers
  (control and output readers, the output-end probe) are assigned partitions and never join or
  commit, so they need no group right;
* the **operator** (``cutover switch/status/wait/plan``) writes and reads the control topic,
  reads the status topic and describes the raw topics (to know the partition count);
* a **job** writes its raw topic; ``Write`` implies the ``Describe`` its producer needs to
  learn the partition count, and on Apache Kafka 2.8+ also its idempotent writes.

Rights a principal holds beyond its row are reported by ``cutover doctor`` as more than needed.
"""

from __future__ import annotations

from enum import StrEnum

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from pydantic import BaseModel, ConfigDict

from cutover.settings import RouterSettings, RouteSettings, Transactions


class Role(StrEnum):
    ROUTER = "router"
    OPERATOR = "operator"
    JOB = "job"


class ResourceKind(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"


class Operation(StrEnum):
    """ACL operations, spelled as ``kafka-acls --operation`` takes them."""

    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    ALTER_CONFIGS = "AlterConfigs"
    DESCRIBE_CONFIGS = "DescribeConfigs"


# What the broker grants along with an operation (Kafka's implied operations).
IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.READ: frozenset({Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
    Operation.ALTER_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS}),
}


class Resource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ResourceKind
    name: str
    prefixed: bool = False   # every name that starts with ``name`` (Kafka's PREFIXED pattern)

    def __str__(self) -> str:
        return f"{self.kind.value} {self.name}{'*' if self.prefixed else ''}"


class Right(BaseModel):
    """One row of the table: ``operation`` on ``resource``, and why the role needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: Resource
    operation: Operation
    why: str

    def binding(self, principal: str) -> AclBinding:
        """The ALLOW ACL that grants this right to ``principal`` (e.g. ``User:router``)."""
        kind = {ResourceKind.TOPIC: ResourceType.TOPIC, ResourceKind.GROUP: ResourceType.GROUP,
                ResourceKind.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID}[self.resource.kind]
        pattern = (ResourcePatternType.PREFIXED if self.resource.prefixed
                   else ResourcePatternType.LITERAL)
        return AclBinding(kind, self.resource.name, pattern, principal, "*",
                          AclOperation[self.operation.name], AclPermissionType.ALLOW)

    def kafka_acls(self, principal: str, bootstrap: str) -> str:
        """The ``kafka-acls.sh`` command (run by an ACL administrator) that grants it."""
        flag = f"--{self.resource.kind.value}"
        pattern = " --resource-pattern-type prefixed" if self.resource.prefixed else ""
        return (f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties "
                f"--add --allow-principal {principal} --operation {self.operation.value} "
                f"{flag} {self.resource.name}{pattern}")


def operation_of(op: AclOperation) -> Operation | None:
    """The table's name for an operation the broker reports (None for cluster-only ones)."""
    return Operation.__members__.get(op.name)


def _topic(name: str) -> Resource:
    return Resource(kind=ResourceKind.TOPIC, name=name)


def _router_rights(s: RouterSettings, r: RouteSettings) -> list[Right]:
    rights = [Right(resource=_topic(s.control_topic), operation=Operation.READ,
                    why="follow the plans")]
    rights += [Right(resource=_topic(t), operation=Operation.READ, why="route raw records")
               for t in r.inputs]
    rights += [
        Right(resource=_topic(r.output), operation=Operation.READ,
              why="read the output back when taking over a partition"),
        Right(resource=_topic(r.output), operation=Operation.WRITE, why="forward records"),
        Right(resource=_topic(r.dead_letter or f"{r.output}.dlq"), operation=Operation.WRITE,
              why="dead-letter records it cannot route"),
    ]
    if r.shadow:
        rights.append(Right(resource=_topic(r.shadow), operation=Operation.WRITE,
                            why="copy suppressed records"))
    rights += [Right(resource=_topic(t), operation=Operation.DESCRIBE_CONFIGS,
                     why="read max.message.bytes: a larger record is dead-lettered, not "
                         "retried")
               for t in (r.output, r.dead_letter or f"{r.output}.dlq", r.shadow) if t]
    return rights


def _router_shared(s: RouterSettings) -> list[Right]:
    ckpt = s.checkpoint_topic or f"{s.group_id}.checkpoints"
    return [
        Right(resource=_topic(s.status_topic), operation=Operation.READ,
              why="recover the last good plan at start"),
        Right(resource=_topic(s.status_topic), operation=Operation.WRITE, why="publish status"),
        Right(resource=_topic(ckpt), operation=Operation.READ, why="restore checkpoints"),
        Right(resource=_topic(ckpt), operation=Operation.WRITE, why="write checkpoints"),
        Right(resource=Resource(kind=ResourceKind.GROUP, name=s.group_id),
              operation=Operation.READ, why="join the router workers' group"),
    ] + ([] if s.transactions is Transactions.OFF else [
        Right(resource=transactional_ids(s.group_id), operation=Operation.WRITE,
              why="write each partition's batch in one transaction (transactions: auto/on)"),
    ])


def transactional_ids(group_id: str) -> Resource:
    """The router's transactional ids, ``<group_id>.<route>.<partition>``, as one prefix."""
    return Resource(kind=ResourceKind.TRANSACTIONAL_ID, name=f"{group_id}.", prefixed=True)


def _operator_rights(s: RouterSettings, routes: list[RouteSettings]) -> list[Right]:
    rights = [
        Right(resource=_topic(s.control_topic), operation=Operation.WRITE,
              why="publish plans (cutover switch, plan init)"),
        Right(resource=_topic(s.control_topic), operation=Operation.READ,
              why="read the current plan and epoch"),
        Right(resource=_topic(s.status_topic), operation=Operation.READ,
              why="cutover status, wait and switch's checks"),
    ]
    rights += [Right(resource=_topic(r.inputs[0]), operation=Operation.DESCRIBE,
                     why="count the route's partitions") for r in routes]
    return rights


def required_rights(settings: RouterSettings, role: Role, route: str | None = None,
                    job_topic: str | None = None) -> list[Right]:
    """The table's rows for ``role`` on one route (all routes when ``route`` is None).

    A job's row names its raw topic: ``job_topic``, or the route's only input.
    """
    routes = [settings.route(route)] if route is not None else list(settings.routes)
    if role is Role.ROUTER:
        return [x for r in routes for x in _router_rights(settings, r)] + \
            _router_shared(settings)
    if role is Role.OPERATOR:
        return _operator_rights(settings, routes)
    topics = [job_topic] if job_topic else [t for r in routes for t in r.inputs]
    return [Right(resource=_topic(t), operation=Operation.WRITE,
                  why="write its tagged records and heartbeats") for t in topics]


def route_resources(settings: RouterSettings, route: str | None = None) -> list[Resource]:
    """Every topic and group a route's deployment uses: where least privilege is checked."""
    routes = [settings.route(route)] if route is not None else list(settings.routes)
    names = [settings.control_topic, settings.status_topic,
             settings.checkpoint_topic or f"{settings.group_id}.checkpoints"]
    for r in routes:
        names += [*r.inputs, r.output, r.dead_letter or f"{r.output}.dlq"]
        if r.shadow:
            names.append(r.shadow)
    out = [_topic(n) for n in dict.fromkeys(names)]
    return [*out, Resource(kind=ResourceKind.GROUP, name=settings.group_id)]
