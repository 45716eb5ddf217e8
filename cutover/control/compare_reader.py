"""Reading both versions' records from a route's raw topics for a while, for a comparison.

A plain consumer with no group and no commits reads the raw topics (the shared one, or one per
version) from their ends at the start of the window to their ends after it: the jobs carry no
extra load, and the router's consumers are not touched. The raw topics, not the shadow topic,
because they hold both versions' records whichever is primary.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from cutover.control.comparison import Comparison, TaggedOutput, match_identity
from cutover.headers import HeaderError, RecordKind, parse_headers
from cutover.key_bucket import BUCKETS
from cutover.key_primary import in_canary
from cutover.rollout.journal import CompareSummary
from cutover.settings import RouteSettings
from router.base.kafka_io import partitions_of, read_to_end, reader_conf


class CompareStopped(RuntimeError):
    """The comparison was asked to stop before its window ended."""


class RawTopicMissing(RuntimeError):
    """A raw topic of the route does not exist; the message names it."""


def raw_positions(conf: dict[str, Any], topics: tuple[str, ...]) -> dict[str, dict[int, int]]:
    """Every partition's end offset now: where the window starts. (On a broker whose
    ListOffsets answers below the real end, the window starts a little early: more records
    are read, none missed.)"""
    out: dict[str, dict[int, int]] = {}
    consumer = Consumer(reader_conf(conf))
    try:
        for topic in topics:
            n = partitions_of(conf, topic)
            if n is None:
                raise RawTopicMissing(f"raw topic {topic!r} does not exist; check the route's "
                                      "inputs in the settings file")
            out[topic] = {}
            for p in range(n):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                           cached=False)
                out[topic][p] = max(low, high)
    finally:
        consumer.close()
    return out


def read_raw(conf: dict[str, Any], starts: dict[str, dict[int, int]]) -> Iterator[TaggedOutput]:
    """The tagged records from ``starts`` to each partition's end now; records whose headers
    are not the tagger's are skipped (the router dead-letters them)."""
    for topic, parts in starts.items():
        for msg in read_to_end(conf, topic, parts):
            try:
                env = parse_headers(msg.headers())
            except HeaderError:
                continue
            yield TaggedOutput(msg.partition(), env.version, env.kind is RecordKind.HEARTBEAT,
                               env.event_time, env.watermark, env.batch, msg.key(),
                               msg.value())


def compare_route(conf: dict[str, Any], route: RouteSettings, old: str, new: str,
                  seconds: float, max_diff: float, samples: int = 5,
                  stop: threading.Event | None = None,
                  share: float | None = None) -> CompareSummary:
    """Watch the route's raw topics for ``seconds``, then compare what both versions wrote;
    raise :class:`CompareStopped` when ``stop`` is set first. ``share``: compare only the
    records whose key is in a canary of that share (cutover.key_primary.in_canary)."""
    starts = raw_positions(conf, route.inputs)
    if (stop or threading.Event()).wait(seconds):
        raise CompareStopped("the comparison was stopped before its window ended")
    keys = None if share is None else partial(in_canary, buckets=round(share * BUCKETS))
    comparison = Comparison(old, new, match_identity(route.dedup.identity), max_diff, samples,
                            keys=keys)
    for rec in read_raw(conf, starts):
        comparison.add(rec)
    return comparison.summary()
