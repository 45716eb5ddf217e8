"""Start-up checks: the topics must fit the settings before a worker takes any partition.

A route's inputs must exist and be co-partitioned; its output, dead-letter and shadow topics
must exist with at least as many partitions (the router keeps each record's partition number).
Their size limits are read too: the route's producers take no record over the smallest
(router.rule.oversize).
The checkpoint topic is created, compacted, when it is missing.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cutover.settings import RouterSettings
from cutover.topic_configs import STATE_TOPIC_CONFIG
from router.base.errors import RouterConfigError
from router.base.kafka_io import client_conf, partitions_of
from router.durability.partition import RouteRuntime
from router.rule.identity import identity_function
from router.rule.oversize import producer_limit, read_limits


def check_routes(settings: RouterSettings) -> dict[str, RouteRuntime]:
    """Each route's runtime (identity function, partition count); raise
    :class:`RouterConfigError` naming the topic and the fix when the topics do not fit."""
    conf = client_conf(settings)
    routes: dict[str, RouteRuntime] = {}
    for r in settings.routes:
        counts = {t: partitions_of(conf, t) for t in r.inputs}
        missing = [t for t, n in counts.items() if n is None]
        if missing:
            raise RouterConfigError(f"route {r.name}: input topic {missing[0]!r} does not "
                                    "exist; create it (or fix routes[].inputs)")
        sizes = {n for n in counts.values() if n is not None}
        if len(sizes) != 1:
            raise RouterConfigError(
                f"route {r.name}: input topics have different partition counts {counts}; "
                "a route's inputs must be co-partitioned")
        n = sizes.pop()
        for kind, t in (("output", r.output), ("dead_letter", r.dead_letter),
                        ("shadow", r.shadow)):
            if t is None:
                continue
            have = partitions_of(conf, t)
            if have is None:
                raise RouterConfigError(
                    f"route {r.name}: {kind} topic {t!r} does not exist; create it with "
                    f"{n} partitions (the router keeps each record's partition number)")
            if have < n:
                raise RouterConfigError(
                    f"route {r.name}: {kind} topic {t!r} has {have} partitions, the inputs "
                    f"have {n}; give it at least {n}")
        routes[r.name] = RouteRuntime(r, identity_function(r.dedup.identity), n)
    written = {rt.settings.name: [t for t in (rt.settings.output, rt.settings.dead_letter,
                                              rt.settings.shadow) if t is not None]
               for rt in routes.values()}
    limits = read_limits(client_conf(settings, "admin"),
                         [t for topics in written.values() for t in topics])
    for name, topics in written.items():
        routes[name].max_record_bytes = producer_limit(limits[t] for t in topics if t in limits)
    return routes


def ensure_checkpoint_topic(settings: RouterSettings, topic: str) -> None:
    """Create the compacted checkpoint topic if it is missing (one partition; the replication
    factor is left to the broker's default: create it yourself for more, with
    ``STATE_TOPIC_CONFIG``, or with ``cutover init``)."""
    admin = AdminClient(client_conf(settings, "admin"))
    if topic in admin.list_topics(timeout=10).topics:
        return
    fut = admin.create_topics([NewTopic(topic, 1, config=STATE_TOPIC_CONFIG)])
    try:
        fut[topic].result(15)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise RouterConfigError(f"cannot create checkpoint topic {topic!r}: {exc}") from None
