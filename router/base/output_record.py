"""The one shape of a record the router writes: a forward, a dead letter or a shadow copy.

A plain positional tuple, not a NamedTuple or a dataclass: the per-record loop builds one per
forwarded record, and a NamedTuple costs several times as much to build; the compiled path
(router/native/_fastpath.c) builds these tuples itself, in the same order
(docs/decisions/008-compiled-per-record-path.md). Readers unpack it.

Its fields, in order:

    topic       the topic written to (the route's output, its dead-letter or shadow topic)
    partition   the partition written to: the raw record's partition (router.durability.ownership)
    key         the record's key, as consumed
    value       the record's value, as consumed (None: left out of a record over the size limit)
    headers     the headers written: the consumed ones plus the router's (``bg.src``,
                ``bg.error``)
    src         a forward's ``bg.src`` value (raw ``topic:partition:offset``, its last header),
                by which a read-back finds it; None for a dead letter or a shadow copy

A leaf: it imports nothing of the router, so every room (the rule's size limits included)
names the same type.
"""

from __future__ import annotations

from cutover.headers import Headers

OutputRecord = tuple[str, int, bytes | None, bytes | None, Headers, bytes | None]
