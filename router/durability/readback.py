"""Reading back the output log: what was already forwarded is not forwarded again.

The output topic is the record of truth: every record there carries ``bg.src`` (raw
topic:partition:offset) and ``bg.event_time``, so a worker that takes over a raw partition
learns which raw offsets at or after its resume position were already forwarded (they are not
forwarded again) and refills the dedup store with the identities of what was forwarded. The
output writer reads another writer's records the same way (router.durability.output_writer).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from cutover.headers import EVENT_TIME, SRC
from cutover.kafka_types import DataMessage
from router.base.kafka_io import read_to_end
from router.dedup.store import DedupStore
from router.rule.identity import IdentityError, IdentityFn

# A rebuild reads up to the retention window's worth of output back: its identities go to
# RocksDB in batches of this many, so the rebuild's memory does not grow with the window.
REBUILD_FLUSH_EVERY = 20_000


@dataclass
class ReadBack:
    forwarded: set[tuple[str, int]] = field(default_factory=set)  # (raw topic, offset)
    records: int = 0
    end: int = 0       # output end offset seen (next offset after the last record read)


class IdentitySink(Protocol):
    """What takes the identities of the records read back: a dedup store, or
    :class:`Identities`."""

    def add(self, identity: bytes, event_time: int) -> None: ...


class Identities(dict[bytes, int]):
    """Identities collected apart from a store's buffer (identity -> event time)."""

    def add(self, identity: bytes, event_time: int) -> None:
        self[identity] = event_time


def parse_src(raw: bytes | None) -> tuple[str, int, int] | None:
    if not raw:
        return None
    try:
        topic, part, off = raw.decode().rsplit(":", 2)
        return topic, int(part), int(off)
    except (ValueError, UnicodeDecodeError):
        return None


class ReadBackFrom(NamedTuple):
    """Where to read one output partition back from, and what for."""

    start: int                # output offset
    resume: dict[str, int]    # the partition's resume offsets (raw topic -> offset)
    store: DedupStore         # takes the identity of every record read


def read_back_outputs(conf: dict[str, Any], output: str, wanted: dict[int, ReadBackFrom],
                      identity: IdentityFn) -> dict[int, ReadBack]:
    """Read output partitions back, all in one pass: for each, collect the raw offsets at or
    after ``resume`` and put every forwarded record's identity into its ``store``. Reading
    stops at each partition's end when the read began."""
    out = {p: ReadBack(end=w.start) for p, w in wanted.items()}
    for msg in read_to_end(conf, output, {p: w.start for p, w in wanted.items()}):
        p = msg.partition()
        w = wanted[p]
        note(out[p], msg, w.resume, identity, w.store)
        if w.store.pending >= REBUILD_FLUSH_EVERY:
            w.store.flush()  # delivered records' identities: safe to write now
    for w in wanted.values():
        w.store.flush()
    return out


def note(rb: ReadBack, msg: DataMessage, resume: dict[str, int], identity: IdentityFn,
         store: IdentitySink) -> tuple[str, int] | None:
    """Account one output record read back; return its (raw topic, offset) if it has one."""
    rb.records += 1
    rb.end = max(rb.end, msg.offset() + 1)
    src = et = None
    for name, value in msg.headers() or ():
        if name == SRC:
            src = parse_src(value)
        elif name == EVENT_TIME and value:
            try:
                et = int(value)
            except ValueError:
                et = None
    if et is not None:
        with contextlib.suppress(IdentityError):
            store.add(identity(msg.key(), msg.value(), et), et)
    if src is None:
        return None
    topic, _, off = src
    if off >= resume.get(topic, 0):
        rb.forwarded.add((topic, off))
    return topic, off
