"""Both versions' outputs for the same event times, record by record: pure, fed with the raw
records a reader found (``cutover.control.compare_reader``), for ``cutover compare`` and the
rollout's COMPARING phase.

Records are matched by the route's identity, except that the default ``record`` identity (a
digest of key, value and event time) would never match two different values, so it matches
by key and event time instead. Each version's last value per identity counts (a replay repeats
it; update mode ends with the final one). Values are compared as JSON when both are JSON
(``12.50`` equals ``12.5``), else as bytes.

Which event times are compared, per partition: only a range that both versions emitted in full
while the reader watched. A version's first batch seen may have started before the reader, so
the range starts above the largest event time (and watermark) of that batch; it ends below
the watermark of the version's last heartbeat seen, below which it emits nothing more. The
range is the intersection over both versions, exclusive at both ends. This assumes that a
version emits roughly in event-time order, as windowed aggregations and jobs on an ordered
input do; records out of that order near the ends show as only-old or only-new.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from hashlib import blake2b
from typing import Any, NamedTuple

from cutover.rollout.journal import CompareCounts, CompareSummary
from router.rule.identity import (
    IdentityError,
    IdentityFn,
    identity_function,
    key_event_time_identity,
)

PREVIEW = 160   # characters of a value kept for the samples


class TaggedOutput(NamedTuple):
    """One raw record as the comparison needs it (headers parsed)."""

    partition: int
    version: str
    heartbeat: bool
    event_time: int | None
    watermark: int | None
    batch: int | None
    key: bytes | None
    value: bytes | None


class _Value(NamedTuple):
    event_time: int
    key: bytes | None
    digest: bytes
    fields: dict[str, Any] | None   # the value's JSON object, for a field-level difference
    preview: str


@dataclass
class _Stream:
    """One version on one partition, as read."""

    first_batch: int | None = None
    low: int | None = None          # largest event time / watermark of the first batch seen
    last_mark: int | None = None    # watermark of the last heartbeat seen
    values: dict[bytes, _Value] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)   # event times without an identity

    def see(self, rec: TaggedOutput) -> None:
        if self.first_batch is None:
            self.first_batch = rec.batch if rec.batch is not None else -1
        if rec.batch is not None and rec.batch <= self.first_batch:
            top = rec.watermark if rec.heartbeat else rec.event_time
            if top is not None and (self.low is None or top > self.low):
                self.low = top
        if rec.heartbeat and rec.watermark is not None:
            self.last_mark = rec.watermark


def match_identity(spec: str | tuple[str, ...]) -> IdentityFn:
    """The identity records are matched by: the route's, or key and event time for
    ``record``."""
    return key_event_time_identity if spec == "record" else identity_function(spec)


class Comparison:
    """Feed raw records of a route with :meth:`add`; :meth:`summary` compares them."""

    def __init__(self, old: str, new: str, identity: IdentityFn, max_diff: float,
                 samples: int = 5, keys: Callable[[bytes | None], bool] | None = None) -> None:
        self.old, self.new = old, new
        self.identity = identity
        self.keys = keys   # the records compared: those whose key it takes (None: all)
        self.max_diff = max_diff
        self.samples = samples
        self.streams: dict[tuple[int, str], _Stream] = {}

    def add(self, rec: TaggedOutput) -> None:
        if rec.version not in (self.old, self.new):
            return
        stream = self.streams.setdefault((rec.partition, rec.version), _Stream())
        stream.see(rec)
        if rec.heartbeat or rec.event_time is None:
            return
        if self.keys is not None and not self.keys(rec.key):
            return   # another key than the canary's: its range still counts, not its record
        try:
            ident = self.identity(rec.key, rec.value, rec.event_time)
        except IdentityError:
            stream.unreadable.append(rec.event_time)
            return
        fields, canonical = _canonical(rec.value)
        stream.values[ident] = _Value(rec.event_time, rec.key,
                                      blake2b(canonical, digest_size=16).digest(), fields,
                                      _preview(rec.value))

    def ranges(self) -> dict[int, tuple[int, int]]:
        """Per partition the event times both versions emitted in full, exclusive."""
        out: dict[int, tuple[int, int]] = {}
        for p in sorted({p for p, _ in self.streams}):
            a, b = self.streams.get((p, self.old)), self.streams.get((p, self.new))
            if a is None or b is None or a.low is None or b.low is None \
                    or a.last_mark is None or b.last_mark is None:
                continue
            lo, hi = max(a.low, b.low), min(a.last_mark, b.last_mark)
            if hi - lo > 1:
                out[p] = (lo, hi)
        return out

    def summary(self) -> CompareSummary:
        ranges = self.ranges()
        counts: dict[int, CompareCounts] = {}
        samples: list[str] = []
        later: list[str] = []
        for p, (lo, hi) in ranges.items():
            old, new = self.streams[(p, self.old)], self.streams[(p, self.new)]

            def inside(v: _Value, lo: int = lo, hi: int = hi) -> bool:
                return lo < v.event_time < hi

            a = {k: v for k, v in old.values.items() if inside(v)}
            b = {k: v for k, v in new.values.items() if inside(v)}
            c = {"equal": 0, "different": 0, "only_old": 0, "only_new": 0}
            for ident in a.keys() | b.keys():
                va, vb = a.get(ident), b.get(ident)
                if va is not None and vb is not None:
                    if va.digest == vb.digest:
                        c["equal"] += 1
                        continue
                    c["different"] += 1
                    if len(samples) < self.samples:
                        samples.append(f"partition {p}, {_where(va)}: {_difference(va, vb)}")
                elif va is not None:
                    c["only_old"] += 1
                    if len(later) < self.samples:
                        later.append(f"partition {p}, {_where(va)}: only in {self.old}: "
                                     f"{va.preview}")
                elif vb is not None:
                    c["only_new"] += 1
                    if len(later) < self.samples:
                        later.append(f"partition {p}, {_where(vb)}: only in {self.new}: "
                                     f"{vb.preview}")
            unreadable = sum(1 for s in (old, new) for t in s.unreadable if lo < t < hi)
            counts[p] = CompareCounts(unreadable=unreadable, **c)
        return CompareSummary(old=self.old, new=self.new, partitions=counts, ranges=ranges,
                              max_diff=self.max_diff,
                              samples=tuple((samples + later)[:self.samples]))


# -- values -------------------------------------------------------------------------------------


def _plain(x: Any) -> Any:
    if isinstance(x, Decimal):
        return format(x.normalize(), "f")
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _canonical(value: bytes | None) -> tuple[dict[str, Any] | None, bytes]:
    """(the JSON object, canonical bytes): numbers compared by value, keys in order."""
    if value is None:
        return None, b"\x00null"
    try:
        doc = json.loads(value, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError):
        return None, value
    plain = _plain(doc)
    return (plain if isinstance(plain, dict) else None,
            json.dumps(plain, sort_keys=True, separators=(",", ":")).encode())


def _preview(value: bytes | None) -> str:
    if value is None:
        return "null"
    text = value.decode("utf-8", errors="replace")
    return text if len(text) <= PREVIEW else text[:PREVIEW] + "..."


def _where(v: _Value) -> str:
    key = v.key.decode("utf-8", errors="replace") if v.key is not None else "null"
    at = datetime.fromtimestamp(v.event_time / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    return f"key {key!r}, event time {at}Z"


def _difference(a: _Value, b: _Value) -> str:
    if a.fields is None or b.fields is None:
        return f"{a.preview} -> {b.preview}"
    parts = []
    for k in sorted(a.fields.keys() | b.fields.keys()):
        if k not in b.fields:
            parts.append(f"-{k}")
        elif k not in a.fields:
            parts.append(f"+{k}={json.dumps(b.fields[k])}")
        elif a.fields[k] != b.fields[k]:
            parts.append(f"{k} {json.dumps(a.fields[k])} -> {json.dumps(b.fields[k])}")
    return ", ".join(parts)
