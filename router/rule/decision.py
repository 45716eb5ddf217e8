"""The routing rule for one raw partition of one route: pure decisions, no I/O, no Faust.

The caller (the router's data path, the tests, the benchmarks) feeds records and plans in
order and acts on the returned :class:`Decision` s. Everything a restart needs is in
:meth:`PartitionRouter.snapshot`, plus the dedup store; held records are not in the snapshot
because the caller never commits its consumer position past them, so they are read again.

Pinning, as the contract means it: a record whose event time is at or below the partition's
horizon ``H`` (the largest event time already decided there) is always decided by the rule
that was in force when the horizon passed it. A new plan therefore changes the partition's
timeline only above ``H``: its boundaries at or below ``H`` move to ``H + 1`` ("pinned"). When
the new plan only adds boundaries to the old one this is exactly "every boundary <= H is pinned
to H + 1"; when it also rewrites history below ``H`` (a retroactive rollback), the history
below ``H`` stays as decided.

Poison timestamps: a data record whose event time is more than ``future_tolerance_ms`` ahead
of the time it was written to the raw topic goes to the dead-letter topic before anything else
looks at it, so it moves no horizon, retention window or pin (otherwise one record stamped ten
years ahead would move its partition's horizon there, and every later record of the partition
would go to the dead-letter topic as older than the retention). "Now" is the record's own write time
(its Kafka timestamp, set by the tagger's producer or by the broker), not the router's clock:
a replay after a restart, on any worker, then sees the same "now" and decides the same way.
With the router's clock a replay would come later, could forward a record it had
dead-lettered, move the horizon differently and pin a later plan elsewhere than the first run
did. Old event times (backfills) are never poison.

Per-key canary (cutover.key_primary): a segment may make another version primary for the keys
in a share of the key buckets. The record's primary is then its segment's rule applied to its
key's bucket, so it depends only on the timeline, the key and the event time; pinning works on
whole segments, canary and all, as for any boundary. Ordered handover holds a record only when
its key changes primary at a boundary not yet passed, and a boundary is passed when every
version that gives keys away there has passed it (for a whole switch: the old primary).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import Any, NamedTuple, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from cutover.key_primary import Canary, KeyRule, bucket_of, handovers, moves
from cutover.plan import CutoverPlan
from router.rule.held_bound import HoldRule
from router.rule.identity import IdentityError, IdentityFn

NO_WATERMARK = -(1 << 63)
NO_LIMIT = 1 << 63


class Outcome(StrEnum):
    FORWARD = "forward"
    SUPPRESS = "suppress"        # not the primary for its event time
    DUPLICATE = "duplicate"      # identity already forwarded
    DEAD_LETTER = "dead_letter"  # cannot be routed safely; reason says why
    HOLD = "hold"                # waits (ordered handover, or no plan yet); decided later
    # would wait, but the partition holds max_held records already: not kept, the caller reads
    # it again from the raw topic when the rule changes (router.rule.held_bound)
    OVER_BOUND = "over_bound"


@dataclass(slots=True)
class Incoming:
    """A raw record as the rule sees it. ``ref`` is the caller's (offset, headers, ...)."""

    version: str
    event_time: int | None
    watermark: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    heartbeat: bool = False
    error: str | None = None     # a header problem found by the caller -> dead letter
    ref: Any = None
    # When the record was written to the raw topic (its Kafka timestamp, ms): the "now" the
    # poison rule measures its event time against. None or negative: not known, not checked.
    written_at: int | None = None


@dataclass(slots=True)
class Decision:
    outcome: Outcome
    record: Incoming
    reason: str | None = None


class TimelineSegment(NamedTuple):
    """One segment of a timeline: its rule from ``start`` (None: the first) on."""

    start: int | None
    rule: KeyRule


class Timeline(BaseModel):
    """A partition's effective timeline: ``primaries[i]`` (with ``canaries[i]``, when any
    segment has a canary) rules from ``bounds[i-1]`` on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bounds: tuple[int, ...] = ()
    primaries: tuple[str, ...] = Field(min_length=1)
    canaries: tuple[Canary | None, ...] = Field(
        default=(), description="each segment's canary when any segment has one; absent "
                                "otherwise, so a timeline without one is stored as before")

    @model_validator(mode="after")
    def _one_canary_per_segment(self) -> Timeline:
        if self.canaries and (len(self.canaries) != len(self.primaries)
                              or all(c is None for c in self.canaries)):
            raise ValueError("canaries: one per segment (null for none), or absent when no "
                             "segment has one")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_canaries(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if not self.canaries:
            out.pop("canaries", None)
        return out

    @classmethod
    def of_plan(cls, plan: CutoverPlan) -> Timeline:
        return cls(bounds=tuple(plan.boundaries),
                   primaries=tuple(s.primary for s in plan.segments),
                   canaries=tuple(s.canary for s in plan.segments) if plan.has_canary else ())

    @property
    def rules(self) -> tuple[KeyRule, ...]:
        canaries = self.canaries or (None,) * len(self.primaries)
        return tuple(KeyRule.of(p, c) for p, c in zip(self.primaries, canaries, strict=True))

    def primary_at(self, t: int) -> str:
        """The primary of a record without a key at ``t``."""
        return self.primaries[bisect.bisect_right(self.bounds, t)]

    def rule_at(self, t: int) -> KeyRule:
        return self.rules[bisect.bisect_right(self.bounds, t)]

    def below(self, h: int) -> list[TimelineSegment]:
        """Segments restricted to event times <= h."""
        rules = self.rules
        out = [TimelineSegment(None, rules[0])]
        for b, rule in zip(self.bounds, rules[1:], strict=True):
            if b > h:
                break
            out.append(TimelineSegment(b, rule))
        return out

    @classmethod
    def from_segments(cls, segs: list[TimelineSegment]) -> Timeline:
        bounds: list[int] = []
        rules: list[KeyRule] = []
        for b, rule in segs:
            if rules and rules[-1] == rule:
                continue  # adjacent segments with one rule are one segment
            if b is not None:
                bounds.append(b)
            rules.append(rule)
        canaries = tuple(r.canary_spec for r in rules)
        return cls(bounds=tuple(bounds), primaries=tuple(r.primary for r in rules),
                   canaries=canaries if any(c is not None for c in canaries) else ())


class PartitionSnapshot(BaseModel):
    """What a restart needs besides the dedup store (held records are re-read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int
    epoch: int | None = None
    horizon: int | None = None
    timeline: Timeline | None = None
    pinned: tuple[int, ...] = ()
    watermarks: dict[str, int] = Field(default_factory=dict)
    closed_through: int | None = Field(
        default=None, description="largest boundary whose ordered handover has completed")


@dataclass
class PartitionCounters:
    forwarded: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    suppressed: dict[str, int] = field(default_factory=dict)
    pauses: int = 0              # times the partition reached max_held and paused
    reread: int = 0              # consumed, dropped after a failed commit, read again


class DedupLookup(Protocol):
    """The part of the dedup store the rule needs (``router.dedup.store.DedupStore`` has it;
    the unit tests use a set)."""

    def __contains__(self, identity: bytes, /) -> bool: ...
    def add(self, identity: bytes, event_time: int, /) -> None: ...


class PartitionRouter:
    """Decides every record of one raw partition of one route."""

    def __init__(
        self,
        partition: int,
        *,
        identity: IdentityFn,
        store: DedupLookup,
        retention_ms: int,
        ordered: bool = True,
        max_held: int = 100_000,
        future_tolerance_ms: int | None = None,
    ) -> None:
        self.partition = partition
        self.identity = identity
        self.store = store
        self.retention_ms = retention_ms
        self.ordered = ordered
        self.max_held = max_held
        # None: no record is judged a poison timestamp (the pure-rule tests that need none)
        self.future_tolerance_ms = future_tolerance_ms
        self.tolerance = NO_LIMIT if future_tolerance_ms is None else future_tolerance_ms
        self.epoch: int | None = None
        self.horizon: int | None = None
        self.timeline: Timeline | None = None
        self.pinned: tuple[int, ...] = ()
        self.watermarks: dict[str, int] = {}
        self.closed_through: int | None = None
        self.held: list[Incoming] = []
        # Over max_held: records the rule holds are not kept until the rule changes.
        self.paused = False
        self.rule_changes = 0    # timeline or closed boundaries changed (router.rule.held_bound)
        self.counters = PartitionCounters()
        # Derived from the timeline, for the per-record path.
        self.bounds: tuple[int, ...] = ()
        self.primaries: tuple[str, ...] = ()
        # each segment's rule when a canary is in the timeline, else None (no key is read)
        self.key_rules: tuple[KeyRule, ...] | None = None
        # per boundary: the versions that give keys away there and so must pass it
        self._givers: tuple[tuple[str, ...], ...] = ()
        self._last_bound: int | None = None
        self.closed_upto = 0  # leading boundaries whose handover is complete
        self._hold_reason = self._over_reason = ""
        self._rule_changed()

    # -- state ------------------------------------------------------------------------------

    def snapshot(self) -> PartitionSnapshot:
        return PartitionSnapshot(
            partition=self.partition, epoch=self.epoch, horizon=self.horizon,
            timeline=self.timeline, pinned=self.pinned, watermarks=dict(self.watermarks),
            closed_through=self.closed_through)

    def restore(self, snap: PartitionSnapshot) -> None:
        if snap.partition != self.partition:
            raise ValueError(f"snapshot of partition {snap.partition} given to "
                             f"partition {self.partition}")
        self.epoch, self.horizon, self.pinned = snap.epoch, snap.horizon, snap.pinned
        self.watermarks = dict(snap.watermarks)
        self.closed_through = snap.closed_through
        self.held = []
        self._set_timeline(snap.timeline)

    def _set_timeline(self, timeline: Timeline | None) -> None:
        self.timeline = timeline
        if timeline is None:
            self.bounds, self.primaries, self._last_bound = (), (), None
            self.key_rules, self._givers = None, ()
        else:
            self.bounds, self.primaries = timeline.bounds, timeline.primaries
            self._last_bound = self.bounds[-1] if self.bounds else None
            rules = timeline.rules
            self.key_rules = rules if timeline.canaries else None
            self._givers = tuple(tuple(dict.fromkeys(h.old for h in handovers(a, b)))
                                 for a, b in pairwise(rules))
        self.closed_upto = 0
        self._advance_closed()
        self._rule_changed()

    def _rule_changed(self) -> None:
        self.rule_changes += 1
        self.paused = False
        if self.timeline is None:
            why = "no cutover plan for this route yet"
        elif self.closed_upto < len(self.bounds):
            givers = " and ".join(repr(v) for v in self._givers[self.closed_upto])
            why = (f"ordered handover: waiting for {givers} to "
                   f"pass {self.bounds[self.closed_upto]}")
        else:
            why = "ordered handover"  # nothing is held once every boundary has closed
        self._hold_reason = why
        self._hold_rule = HoldRule(self.timeline is not None, self.ordered, self.bounds,
                                   self.primaries, self.closed_upto, self.tolerance,
                                   self.key_rules)
        self._over_reason = (f"{why}; {self.max_held} records held (max_held): not kept, read "
                             "again from the raw topic")

    def hold_rule(self) -> HoldRule:
        """A frozen copy of what decides HOLD now (router.rule.held_bound); built at each rule
        change, so asking costs nothing per record."""
        return self._hold_rule

    # -- plans ------------------------------------------------------------------------------

    def apply_plan(self, plan: CutoverPlan) -> list[Decision]:
        """Adopt a newer plan epoch (older or equal epochs are ignored); may release records."""
        if self.epoch is not None and plan.epoch <= self.epoch:
            return []
        new = Timeline.of_plan(plan)
        h = self.horizon
        pinned: tuple[int, ...]
        if self.timeline is None or h is None:
            effective, pinned = new, ()
        else:
            old_below = self.timeline.below(h)
            if old_below == new.below(h):  # agrees on everything decided: nothing to pin
                effective, pinned = new, ()
            else:
                segs = [*old_below, TimelineSegment(h + 1, new.rule_at(h + 1))]
                segs += [TimelineSegment(b, rule)
                         for b, rule in zip(new.bounds, new.rules[1:], strict=True)
                         if b > h + 1]
                effective, pinned = Timeline.from_segments(segs), (h + 1,)
        self.epoch = plan.epoch
        self.pinned = pinned
        self._set_timeline(effective)
        return self._release()

    # -- records ----------------------------------------------------------------------------

    def observe(self, rec: Incoming) -> list[Decision]:
        """Decide one record; a heartbeat's watermark may also release held records.

        Only heartbeats move a version's watermark. A data record carries its micro-batch's
        watermark W, but the batch is the one that emits the windows closing below W, so more
        records below W may follow it; the heartbeats written after the batch's data are the
        first point at which nothing more below W can come from that version.
        """
        if rec.error is not None:
            self.counters.dead_lettered += 1
            return [Decision(Outcome.DEAD_LETTER, rec, rec.error)]
        released = False
        wm = rec.watermark
        if (rec.heartbeat and wm is not None
                and wm > self.watermarks.get(rec.version, NO_WATERMARK)):
            self.watermarks[rec.version] = wm
            released = self._advance_closed()
        if rec.heartbeat:
            return self._release() if released else []
        out = [self.decide(rec)]
        if released:
            out.extend(self._release())
        return out

    def suppresses(self, version: str, t: int, written_at: int | None = None) -> bool:
        """The fast half of :meth:`observe` for a well-formed data record: True (and counted)
        when ``version`` is not the primary for ``t``; then nothing else about the record is
        needed. Half of all raw records are the other version's. Otherwise (a poison
        timestamp too, and every record while a canary is in the timeline: its primary
        depends on its key) the caller gets the decision from :meth:`decide`."""
        prims = self.primaries
        if not prims or self.key_rules is not None:
            return False
        lb = self._last_bound  # most records fall in the last segment: checked first
        if version == (prims[-1] if lb is None or t >= lb
                       else prims[bisect.bisect_right(self.bounds, t)]):
            return False
        if written_at is not None and t - self.tolerance > written_at >= 0:
            return False
        h = self.horizon
        if h is None or t > h:
            self.horizon = t
        sup = self.counters.suppressed
        sup[version] = sup.get(version, 0) + 1
        return True

    def decide(self, rec: Incoming, *, releasing: bool = False) -> Decision:
        """:meth:`observe` for a well-formed data record (no error, not a heartbeat): such a
        record never releases others, so its answer is exactly one decision. ``releasing``:
        the record is already held (a release re-decides it)."""
        w = rec.written_at
        if w is not None and rec.event_time - self.tolerance > w >= 0:  # type: ignore[operator]
            return self._poison(rec, w)
        if self.timeline is None:
            return self._hold(rec, releasing)
        t: int = rec.event_time  # type: ignore[assignment]
        lb = self._last_bound
        seg = (len(self.bounds) if lb is None or t >= lb
               else bisect.bisect_right(self.bounds, t))
        rules = self.key_rules
        if rules is None:
            if rec.version != self.primaries[seg]:
                self._count_suppressed(rec.version, t)
                return Decision(Outcome.SUPPRESS, rec)
            if self.ordered and seg > self.closed_upto:
                return self._hold(rec, releasing)
        else:  # a canary: the primary of the record's key
            bucket = bucket_of(rec.key)
            if rec.version != rules[seg].owner(bucket):
                self._count_suppressed(rec.version, t)
                return Decision(Outcome.SUPPRESS, rec)
            if self.ordered and seg > self.closed_upto and \
                    moves(rules, self.closed_upto, seg, bucket):
                return self._hold(rec, releasing)
        h = self.horizon
        if h is not None and t < h - self.retention_ms:
            self.counters.dead_lettered += 1
            return Decision(Outcome.DEAD_LETTER, rec, f"event time {t} is older than the "
                            f"dedup retention ({self.retention_ms} ms below horizon {h}): "
                            "cannot check for duplicates")
        try:
            ident = self.identity(rec.key, rec.value, t)
        except IdentityError as exc:
            self.counters.dead_lettered += 1
            return Decision(Outcome.DEAD_LETTER, rec, str(exc))
        if h is None or t > h:
            self.horizon = t
        if ident in self.store:
            self.counters.duplicates += 1
            return Decision(Outcome.DUPLICATE, rec)
        self.store.add(ident, t)
        self.counters.forwarded += 1
        return Decision(Outcome.FORWARD, rec)

    def _hold(self, rec: Incoming, releasing: bool) -> Decision:
        """HOLD (kept in :attr:`held`), or OVER_BOUND once ``max_held`` are kept. The reasons
        are built once per rule change: a stalled old version sends every record here."""
        if releasing:
            return Decision(Outcome.HOLD, rec, self._hold_reason)
        if len(self.held) >= self.max_held:
            if not self.paused:
                self.paused = True
                self.counters.pauses += 1
            return Decision(Outcome.OVER_BOUND, rec, self._over_reason)
        self.held.append(rec)
        return Decision(Outcome.HOLD, rec, self._hold_reason)

    def _poison(self, rec: Incoming, written_at: int) -> Decision:
        self.counters.dead_lettered += 1
        ahead = rec.event_time - written_at  # type: ignore[operator]
        return Decision(Outcome.DEAD_LETTER, rec, f"event time {rec.event_time} is {ahead} ms "
                        f"ahead of the time the record was written ({written_at}), beyond "
                        f"future_tolerance_ms ({self.future_tolerance_ms} ms): a poison "
                        "timestamp would move the partition's horizon; fix the job's event "
                        "time, or raise future_tolerance_ms if such records are expected")

    def _count_suppressed(self, version: str, t: int) -> None:
        self._advance_horizon(t)
        sup = self.counters.suppressed
        sup[version] = sup.get(version, 0) + 1

    def _advance_horizon(self, t: int) -> None:
        if self.horizon is None or t > self.horizon:
            self.horizon = t

    def _advance_closed(self) -> bool:
        """Close boundaries whose previous primary has passed them; True if any closed."""
        bounds, givers, wms = self.bounds, self._givers, self.watermarks
        before = self.closed_upto
        i = before
        ct = self.closed_through
        while i < len(bounds):
            b = bounds[i]
            if (ct is not None and b <= ct) or all(wms.get(v, NO_WATERMARK) >= b
                                                   for v in givers[i]):
                i += 1
            else:
                break
        if i > before:
            self.closed_upto = i
            top = bounds[i - 1]
            if ct is None or top > ct:
                self.closed_through = top
            self._rule_changed()
            return True
        return False

    def _release(self) -> list[Decision]:
        if not self.held:
            return []
        keep: list[Incoming] = []
        out: list[Decision] = []
        for rec in self.held:
            d = self.decide(rec, releasing=True)
            if d.outcome is Outcome.HOLD:
                keep.append(rec)
            else:
                out.append(d)
        self.held = keep
        return out

    @property
    def reads_keys(self) -> bool:
        """A canary is in this partition's timeline: a record's primary depends on its key
        (router/native/_fastpath.c reads ``key_rules`` and the key's bucket then)."""
        return self.key_rules is not None

    # -- readiness inputs -------------------------------------------------------------------

    @property
    def boundary(self) -> int | None:
        """The start of the last segment of this partition's timeline: the effective (maybe
        pinned) boundary of the transition of the epoch it applied; None if it has one."""
        return self._last_bound

    def boundary_of(self, to_version: str) -> int | None:
        """This partition's (possibly pinned) boundary where ``to_version`` becomes primary
        for good: the start of the last segment, if its primary is ``to_version``."""
        if not self.bounds or self.primaries[-1] != to_version:
            return None
        return self.bounds[-1]

