"""Reading back the output log when a worker takes over a raw partition.

The output topic is the record of truth: every record there carries ``bg.src`` (raw
topic:partition:offset) and ``bg.event_time``, so the worker learns which raw offsets at or after
its resume position were already forwarded (they are not forwarded again) and refills the dedup
store with the identities of what was forwarded.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from cutover.headers import EVENT_TIME, SRC
from router.dedup_store import DedupStore
from router.identity import IdentityError, IdentityFn
from router.kafka_io import read_to_end


@dataclass
class ReadBack:
    forwarded: set[tuple[str, int]] = field(default_factory=set)  # (raw topic, offset)
    records: int = 0
    end: int = 0       # output end offset seen (next offset after the last record read)


def parse_src(raw: bytes | None) -> tuple[str, int, int] | None:
    if not raw:
        return None
    try:
        topic, part, off = raw.decode().rsplit(":", 2)
        return topic, int(part), int(off)
    except (ValueError, UnicodeDecodeError):
        return None


def read_back_output(conf: dict[str, Any], output: str, partition: int, start: int,
                     resume: dict[str, int], identity: IdentityFn,
                     store: DedupStore) -> ReadBack:
    """Read output ``partition`` from ``start`` to its end: collect raw offsets at or after
    ``resume`` and put every forwarded record's identity into ``store``."""
    rb = ReadBack(end=start)
    for msg in read_to_end(conf, output, {partition: start}):
        rb.records += 1
        rb.end = msg.offset() + 1
        src = et = None
        for name, value in msg.headers() or ():
            if name == SRC:
                src = parse_src(value)
            elif name == EVENT_TIME and value:
                try:
                    et = int(value)
                except ValueError:
                    et = None
        if src is not None:
            topic, _, off = src
            if off >= resume.get(topic, 0):
                rb.forwarded.add((topic, off))
        if et is not None:
            with contextlib.suppress(IdentityError):
                store.add(identity(msg.key(), msg.value(), et), et)
    store.flush()
    return rb
