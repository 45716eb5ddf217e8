"""Held records over ``max_held``: what is not kept in memory, and how it is read again.

Ordered handover holds the new primary's records at or above a boundary until the old primary
passes it. A job that dies after the switch would make that list grow with the stall, by about
a kilobyte and a half of memory per waiting record (docs/decisions/006). So a partition keeps
at most ``max_held`` of them; past that it *pauses*: a record the rule would hold is not kept,
and the partition's resume offset stays at the first one not kept, so a restart reads it again
too.

Why the raw partition is still read while paused: with both versions on one raw topic (the
default layout) the old version's records and heartbeats come after the dropped records on the
same partition. Its records below the boundary must reach the output before any held record
(that is what ordered handover means), and its heartbeats are what releases the held records;
a partition that stopped fetching would wait for them forever. Reading on costs CPU, not
memory: a record that is not kept is forgotten after its headers are read.

When the rule's state changes (a boundary closes, a plan arrives), the records kept are
released or re-decided by the rule itself, and each raw topic of the partition that dropped
records is *rewound*: the consumer seeks back to the first record not kept and reads the range
again. In that range only the records that were not kept are decided again (:class:`Window`
says which, from a frozen copy of the rule that dropped them, :class:`HoldRule`); every other
record there was decided on the first pass and is skipped. Nothing here grows with the stall:
a window is a start offset and a copy of the rule, and windows nest only when a rule change
still holds records that a rewind reads again (one level per such change).

Pure: no I/O; router.worker.datapath seeks and feeds records in.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from cutover.key_primary import KeyRule, bucket_of, moves
from cutover.plan import CutoverPlan


class HoldRule(NamedTuple):
    """The part of a partition's rule that decides HOLD, frozen when records start being
    dropped (router.rule.decision.PartitionRouter.decide holds exactly these records)."""

    planned: bool                  # a plan is in force (no plan: every data record waits)
    ordered: bool
    bounds: tuple[int, ...]
    primaries: tuple[str, ...]
    closed_upto: int               # leading boundaries whose handover is complete
    tolerance: int                 # future tolerance (ms): a poison record is never held
    # each segment's rule when a canary is in the timeline (a record's key decides), else None
    rules: tuple[KeyRule, ...] | None = None

    def holds(self, version: str, t: int, written_at: int | None,
              key: bytes | None = None) -> bool:
        if written_at is not None and t - self.tolerance > written_at >= 0:
            return False  # dead-lettered as a poison timestamp, never held
        if not self.planned:
            return True
        if not self.ordered:
            return False
        seg = bisect.bisect_right(self.bounds, t)
        if seg <= self.closed_upto:
            return False
        if self.rules is None:
            return version == self.primaries[seg]
        bucket = bucket_of(key)
        return (version == self.rules[seg].owner(bucket)
                and moves(self.rules, self.closed_upto, seg, bucket))


class Segment(NamedTuple):
    """Part of a rewind: offsets below ``end`` (and at or above the previous segment's end)
    are re-decided when ``window`` did not keep them."""

    end: int
    window: Window


@dataclass(frozen=True, slots=True)
class Window:
    """Records of one raw topic of a partition not kept since offset ``start``: the ones
    ``rule`` holds, among the ones this pass decided (``context``: the rewind being read when
    the window opened; past its last segment every record was decided)."""

    start: int
    out_pos: int                   # output position at ``start`` (read-back lower bound)
    rule: HoldRule
    context: tuple[Segment, ...] = ()

    def dropped(self, offset: int, version: str, t: int, written_at: int | None,
                key: bytes | None = None) -> bool:
        """Was the data record at ``offset`` (at or after ``start``, with ``key``) not kept?"""
        if not self.rule.holds(version, t, written_at, key):
            return False
        outer = _segment_at(self.context, offset)
        return outer is None or outer.dropped(offset, version, t, written_at, key)


def _segment_at(segments: tuple[Segment, ...], offset: int) -> Window | None:
    for seg in segments:
        if offset < seg.end:
            return seg.window
    return None


@dataclass(slots=True)
class TopicBound:
    """One raw topic of a paused (or rewinding) partition."""

    window: Window | None = None          # open: records are being dropped
    rewind: tuple[Segment, ...] = ()      # being read again
    stale_from: int | None = None         # after a seek: records at or above are stale


class Pass(Enum):
    """Where a record of a paused or rewinding topic stands."""

    FIRST = "first"    # not read before: decide it
    STALE = "stale"    # fetched before a rewind's seek: ignore it (it comes again)
    AGAIN = "again"    # read before: decide it again only if it was not kept (:meth:`dropped`)


class Seek(NamedTuple):
    topic: str
    offset: int


@dataclass(slots=True)
class HeldBound:
    """The paused and rewinding raw topics of one owned partition."""

    topics: dict[str, TopicBound] = field(default_factory=dict)
    rule_seen: int = 0    # the rule's change count when the open windows opened
    # Plans that arrived while records not kept were being read again: applied once they are
    # (a plan pins at the partition's horizon, so it must see every earlier record decided,
    # as it would have without the bound).
    pending: list[CutoverPlan] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return not self.topics

    def rewinding(self, positions: dict[str, int]) -> bool:
        """True while a rewind has records to read again (``positions``: next offsets)."""
        for topic, tb in list(self.topics.items()):
            tb.rewind = tuple(s for s in tb.rewind if s.end > positions[topic])
            if tb.rewind or tb.stale_from is not None:
                return True
            if tb.window is None:
                del self.topics[topic]
        return False

    @property
    def dropping(self) -> bool:
        return any(tb.window is not None for tb in self.topics.values())

    def drop(self, topic: str, offset: int, out_pos: int, rule: HoldRule,
             rule_changes: int) -> None:
        """The record at ``offset`` would be held but the partition holds ``max_held``."""
        tb = self.topics.setdefault(topic, TopicBound())
        if tb.window is None:
            self.rule_seen = rule_changes
            tb.window = Window(offset, out_pos, rule,
                               tuple(s for s in tb.rewind if s.end > offset))

    def resume_floor(self) -> list[tuple[str, int, int]]:
        """(topic, offset, output position) the partition's resume point must not pass: an
        open window's first record; for a rewind, its lowest output position (its records'
        outputs may lie above it), with an offset the resume offsets are below anyway."""
        floor = [(t, tb.window.start, tb.window.out_pos) for t, tb in self.topics.items()
                 if tb.window is not None]
        floor.extend((t, tb.rewind[-1].end, min(s.window.out_pos for s in tb.rewind))
                     for t, tb in self.topics.items() if tb.rewind)
        return floor

    def rewind(self, positions: dict[str, int]) -> list[Seek]:
        """The rule changed: read every topic's not-kept records again. ``positions``: the
        next offset to read per topic (everything below it has been through a pass)."""
        seeks: list[Seek] = []
        for topic, tb in self.topics.items():
            w = tb.window
            if w is None:
                continue
            end = positions[topic]
            tb.rewind = (Segment(end, w), *(s for s in tb.rewind if s.end > end))
            tb.window = None
            tb.stale_from = end
            seeks.append(Seek(topic, w.start))
        return seeks

    def place(self, topic: str, offset: int) -> Pass:
        """Called for each record of a topic in :attr:`topics` before it is decided."""
        tb = self.topics[topic]
        if tb.stale_from is not None:
            if offset >= tb.stale_from:
                return Pass.STALE
            tb.stale_from = None
        while tb.rewind and offset >= tb.rewind[0].end:
            tb.rewind = tb.rewind[1:]
        if tb.rewind:
            return Pass.AGAIN
        if tb.window is None:
            del self.topics[topic]
        return Pass.FIRST

    def dropped(self, topic: str, offset: int, version: str, t: int,
                written_at: int | None, key: bytes | None = None) -> bool:
        """For a data record :meth:`place` called AGAIN: was it not kept on its last pass?
        (``key``: the record's key, which decides where a canary is in the timeline.)"""
        return self.topics[topic].rewind[0].window.dropped(offset, version, t, written_at,
                                                            key)
