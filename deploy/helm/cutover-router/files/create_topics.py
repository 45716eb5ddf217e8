"""Create every topic a router settings file names; what exists already is left as it is.

Run by the chart's init Job with the router's own settings file (the same client security):
the routes' raw, output, dead-letter and shadow topics with the given partition count, and the
control, status and checkpoint topics compacted with one partition. An existing topic with
another partition count is reported (exit 1): the router keeps each record's partition number,
so a route's topics must agree.
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cutover.settings import SettingsError, load_settings
from router.base.kafka_io import client_conf


def wanted(config: str, partitions: int, also: tuple[str, ...] = ()
           ) -> dict[str, tuple[int, dict[str, str]]]:
    """Topic -> (partitions, configs) for every topic the settings name, and ``also``."""
    s = load_settings(config)
    topics: dict[str, tuple[int, dict[str, str]]] = {name: (partitions, {}) for name in also}
    for route in s.routes:
        for name in (*route.inputs, route.output, route.dead_letter, route.shadow):
            if name:
                topics[name] = (partitions, {})
    for name in (s.control_topic, s.status_topic, s.checkpoint_topic):
        if name:
            topics[name] = (1, {"cleanup.policy": "compact"})
    return topics


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--replication-factor", type=int, default=0, help="0: the brokers' default")
    p.add_argument("--also", action="append", default=[], metavar="TOPIC",
                   help="another topic with --partitions (a job's input, say); repeatable")
    args = p.parse_args(argv)
    try:
        topics = wanted(args.config, args.partitions, tuple(args.also))
        conf = {k: v for k, v in client_conf(load_settings(args.config), "admin").items()
                if k != "logger"}
    except SettingsError as exc:
        print(f"create_topics: {exc} (fix the settings)", file=sys.stderr)
        return 2
    admin = AdminClient(conf)
    try:
        existing = admin.list_topics(timeout=30).topics
    except KafkaException as exc:
        print(f"create_topics: Kafka at {conf['bootstrap.servers']} did not answer ({exc}); "
              "check settings.bootstrap and the client security settings", file=sys.stderr)
        return 3
    wrong = [f"{name} has {len(existing[name].partitions)} partitions, {n} are wanted"
             for name, (n, _) in topics.items()
             if name in existing and len(existing[name].partitions) != n]
    replication = args.replication_factor or -1
    new = [NewTopic(name, num_partitions=n, replication_factor=replication, config=cfg)
           for name, (n, cfg) in topics.items() if name not in existing]
    failed = []
    if new:
        for name, fut in admin.create_topics(new, request_timeout=30).items():
            try:
                fut.result()
                print(f"created topic {name}")
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    failed.append(f"{name}: {exc}")
    for name in sorted(set(topics) - {t.topic for t in new}):
        print(f"topic {name} exists")
    for line in wrong + failed:
        print(f"create_topics: {line}; change the topic or the chart's init.partitions",
              file=sys.stderr)
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
