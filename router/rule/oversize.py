"""Output records larger than the topics accept: dead-lettered with a reason, not retried.

A record the output topic refuses for its size (its ``max.message.bytes``, or the broker's
``message.max.bytes`` where the topic sets none) failed its batch's delivery, and the batch was
aborted and replayed: the same record failed again, and its partition made no progress again,
forever. The router now reads the limit of each route's output, dead-letter and shadow topics
at start-up, and its producers take no record over the smallest of them
(``message.max.bytes``, ``batch.size``: so no batch of small records is over either). A record
over it is refused by the client at once, when it is produced; the router then writes it to
the dead-letter topic instead, with a reason naming the size and the limit, and goes on.

The dead letter has no value: the dead-letter topic goes through the same producer and limit,
so the value would not fit there either. Nothing is lost: the record stays in the raw topic,
at the place ``bg.src`` names, for as long as the raw topic keeps it. Its identity stays in the
dedup store, so a later copy of it is a duplicate of the one dead-lettered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from cutover.headers import ERROR
from router.base.output_record import OutputRecord

log = logging.getLogger("cutover.router")

# What a producer takes when a topic's limit cannot be read: librdkafka's own default, below
# the broker's (1,048,588), so nothing changes where the limits are the defaults.
DEFAULT_LIMIT = 1_000_000
# A record batch's header (61 bytes) comes on top of its records: room for it, and some.
BATCH_HEADER = 100
# librdkafka's largest per-record overhead (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD).
RECORD_OVERHEAD = 36
LIBRDKAFKA_MIN = 1000   # the smallest message.max.bytes librdkafka takes
# A queued record's size is added up only where its key and value come this close to the
# limit (headers are rarely more), so the pass before producing costs little per record.
HEADER_ROOM = 65536

Headers = list[tuple[str, bytes | None]]


def read_limits(conf: dict[str, Any], topics: Iterable[str]) -> dict[str, int]:
    """``max.message.bytes`` of each topic (its own, or the broker's default); a topic whose
    configuration cannot be read (no DescribeConfigs right, a broker without the API) is left
    out, with a warning."""
    names = sorted(set(topics))
    admin = AdminClient(conf)
    limits: dict[str, int] = {}
    try:
        futures = admin.describe_configs([ConfigResource("topic", t) for t in names])
    except (KafkaException, ValueError) as exc:
        log.warning("cannot read the size limits of topics %s (%s); assuming %d bytes",
                    names, exc, DEFAULT_LIMIT)
        return limits
    for resource, future in futures.items():
        try:
            entry = future.result(15).get("max.message.bytes")
            if entry is not None and entry.value is not None:
                limits[resource.name] = int(entry.value)
        except (KafkaException, ValueError) as exc:
            log.warning("cannot read max.message.bytes of topic %s (%s); assuming %d bytes",
                        resource.name, exc, DEFAULT_LIMIT)
    unknown = [t for t in names if t not in limits]
    if unknown:
        log.warning("the broker gives no max.message.bytes for topics %s; assuming %d bytes",
                    unknown, DEFAULT_LIMIT)
    return limits


def producer_limit(limits: Iterable[int]) -> int:
    """The largest record (librdkafka's reckoning) a producer writing topics with these
    limits may take, leaving room for the record batch around it."""
    smallest = min(limits, default=DEFAULT_LIMIT + BATCH_HEADER)
    return max(LIBRDKAFKA_MIN, smallest - BATCH_HEADER)


def size_conf(limit: int) -> dict[str, int]:
    """A producer's settings for records of at most ``limit`` bytes."""
    return {"message.max.bytes": limit, "batch.size": min(limit, DEFAULT_LIMIT)}


def _varint(n: int) -> int:
    """Bytes of the zigzag varint of ``n`` (librdkafka's rd_uvarint_enc_i64)."""
    z, size = n << 1, 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def wire_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    """A record's size as librdkafka checks it against ``message.max.bytes``."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, raw in headers or ():
        n, v = len(name.encode()), len(raw or b"")
        size += n + v + _varint(n) + _varint(v)
    return size


def is_too_large(exc: BaseException) -> bool:
    """The client refused a record for its size."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def dead_letter_of(dead_letter: str, partition: int, key: bytes | None, value: bytes | None,
                   headers: Headers, limit: int) -> tuple[str, int, bytes | None, Headers]:
    """The dead letter of an output record over ``limit``: (topic, partition, key, headers),
    without the value (and without the key too, if that alone is over); ``headers`` carry the
    record's ``bg.src``."""
    size = wire_size(key, value, headers)
    reason = (f"record of {size} bytes is over the {limit} bytes the output topic takes "
              "(its max.message.bytes, less room for the batch header); its value is left "
              "out here and stays in the raw topic at bg.src; raise max.message.bytes of the "
              "output and dead-letter topics to forward records this large")
    hdrs = [*headers, (ERROR, reason.encode())]
    if wire_size(key, None, hdrs) > limit:
        key = None
    return dead_letter, partition, key, hdrs


def without_value(out: OutputRecord, limit: int) -> OutputRecord:
    """A dead letter or shadow copy over ``limit``, written without its value; its
    ``bg.error`` says so (after the reason it had, if any)."""
    topic, p, key, value, headers, src = out
    note = (f"value of {len(value or b'')} bytes left out: the record is over the {limit} "
            "bytes this topic takes; it stays in the raw topic at bg.src")
    reasons = [v for k, v in headers if k == ERROR and v]
    kept = [(k, v) for k, v in headers if k != ERROR]
    reason = "; ".join([*(r.decode(errors="replace") for r in reasons), note])
    hdrs = [*kept, (ERROR, reason.encode())]
    if wire_size(key, None, hdrs) > limit:
        key = None
    return topic, p, key, None, hdrs, src
