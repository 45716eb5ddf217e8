"""A partition over ``max_held`` (router.rule.held_bound), as the data path reads it: which consumed
records are decided now, and the seek back to the records not kept once the rule that held them
changes. The bookkeeping (windows, passes, plans that wait) is router.rule.held_bound's; this is
what the loop does with a consumed record and its consumer."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, Message, TopicPartition

from cutover.headers import HeaderError, RecordKind, data_envelope, parse_headers
from router.durability.partition import Owned
from router.rule.held_bound import Pass

log = logging.getLogger("cutover.router")


def read_before(owned: Owned, msg: Message, topic: str, off: int,
                apply_pending: Callable[[Owned], bool]) -> bool:
    """For a record of a paused or rewinding topic: True when it is not to be decided now
    (fetched before a rewind's seek, or decided on an earlier pass). ``apply_pending``: the
    data path's application of plans that waited for a rewind (True if one rewound again)."""
    bound = owned.bound
    if topic not in bound.topics:
        return False
    where = bound.place(topic, off)
    if where is Pass.FIRST:
        # a plan that waited applies before this record; if it rewinds, the record is
        # read again after the rewound range
        return bool(bound.pending) and apply_pending(owned)
    if where is Pass.STALE:
        return True
    envelope = data_envelope(msg.headers())
    if envelope is None:
        try:
            tag = parse_headers(msg.headers())
        except HeaderError:
            tag = None  # dead-lettered on its first pass
        if tag is not None and tag.kind is RecordKind.DATA and tag.event_time is not None:
            envelope = (tag.version, tag.event_time)
    if envelope is not None and bound.dropped(topic, off, *envelope, msg.timestamp()[1],
                                              msg.key()):
        return False
    dur = owned.durability
    dur.next_offsets[topic] = off + 1
    dur.dirty = True
    return True


def rewind_if_changed(consumer: Consumer, owned: Owned) -> bool:
    """The rule changed on a paused partition: read its records not kept again."""
    bound, dur = owned.bound, owned.durability
    if not bound.dropping or owned.router.rule_changes == bound.rule_seen:
        return False
    for seek in bound.rewind(dur.next_offsets):
        consumer.seek(TopicPartition(seek.topic, owned.partition, seek.offset))
        dur.next_offsets[seek.topic] = seek.offset
        dur.dirty = True
        log.info("partition %s/%d: %s read again from offset %d (records not kept over "
                 "max_held)", owned.route.settings.name, owned.partition, seek.topic,
                 seek.offset)
    return True
