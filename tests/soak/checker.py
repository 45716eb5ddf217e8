"""The checker: reads the output with ``read_committed`` all along and verifies every record.

The reference, computed without the router: event ``n`` (partition ``p``, event time ``t``, key
``k``) must be on output partition ``p`` exactly once, in the copy of ``primary_p(k, t)``, when
that version's copy was acknowledged by the broker. ``primary_p`` is the timeline of the plans
published, each plan's new boundary taken as partition ``p`` reported it on the status topic
when it applied that epoch (its pinned boundary, DESIGN.md "Routing rule"), else as published;
within a segment with a per-key canary, the key's bucket decides (``cutover.key_primary``, the
product's own pure function: a record without a key follows the segment's primary).

Ordered handover: at a boundary ``B`` of a partition, a record of a key whose primary changes
at ``B`` (at or above it) follows every record below ``B`` of the versions that give keys away
there (docs/contract.md, "The routing rule"). For a whole switch every key moves and the one
giver is the old primary, so this is: no record below ``B`` follows one at or above it. With a
canary a key that does not move keeps its version's own order, and is not checked there.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pydantic import BaseModel, ConfigDict

from cutover.headers import EVENT_TIME
from cutover.key_bucket import key_bucket
from cutover.key_primary import KeyRule, handovers
from cutover.plan import CutoverPlan
from cutover.status import RouteStatus, parse_status
from router.base.kafka_io import base_conf, reader_conf
from tests.output_counts import OutputCounts
from tests.soak.workload import Event, event_key, parse_value

RIDE_THROUGH = {"socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000}


class OutRecord(NamedTuple):
    """What the checker keeps of one output record (a soak holds hundreds of thousands)."""

    n: int
    t: int
    version: str


@dataclass
class OutputLog:
    """The output as read so far: records per partition in order, arrival times per partition
    (wall clock, seconds), and per (partition, epoch) the boundary the partition reported."""

    records: dict[int, list[OutRecord]] = field(default_factory=dict)
    arrived_at: dict[int, list[float]] = field(default_factory=dict)
    reported: dict[tuple[int, int], int] = field(default_factory=dict)
    unreadable: int = 0

    def count(self) -> int:
        return sum(len(r) for r in self.records.values())


class OutputWatcher:
    """One thread reading the output topic (``read_committed``) and the status topic."""

    def __init__(self, bootstrap: str, output: str, status: str, route: str,
                 partitions: int) -> None:
        # A consumer that rides through a frozen broker, as docs/operations.md advises the
        # output's consumers: with librdkafka's defaults a fetch sent to a frozen leader waits
        # 60 s and the client learns of the new leader at its 5-minute metadata refresh, so
        # the checker would measure its own stall, not the router's output.
        conf = {**reader_conf(base_conf(bootstrap)), "fetch.wait.max.ms": 100, "log_level": 0,
                "isolation.level": "read_committed", **RIDE_THROUGH}
        self.out = Consumer(conf)
        self.out.assign([TopicPartition(output, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.status = Consumer(conf)
        self.status.assign([TopicPartition(status, 0, OFFSET_BEGINNING)])
        self.route = route
        self.log = OutputLog(records={p: [] for p in range(partitions)},
                             arrived_at={p: [] for p in range(partitions)})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checker", daemon=True)
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(30)
        self.out.close()
        self.status.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._read_output()
                self._read_status()
        except Exception as exc:  # reported by the soak; the counts then show what is missing
            self.error = f"{type(exc).__name__}: {exc}"

    def _read_output(self) -> None:
        msgs = self.out.consume(5000, 0.2)
        now = time.time()
        for m in msgs:
            if m.error() is not None:
                continue
            value = m.value()
            try:
                n, version = parse_value(value or b"")
                t = int(dict(m.headers() or [])[EVENT_TIME] or b"")
            except (ValueError, KeyError):
                self.log.unreadable += 1
                continue
            p = m.partition()
            assert p is not None
            self.log.records[p].append(OutRecord(n, t, version))
            self.log.arrived_at[p].append(now)

    def _read_status(self) -> None:
        for m in self.status.consume(1000, 0):
            if m.error() is not None or m.value() is None:
                continue
            try:
                st = parse_status(m.value())
            except ValueError:
                continue
            if not isinstance(st, RouteStatus) or st.route != self.route:
                continue
            for p, ps in st.partitions.items():
                if ps.epoch is not None and ps.boundary is not None:
                    self.log.reported.setdefault((p, ps.epoch), ps.boundary)


class StepCount(BaseModel):
    """One segment of the published timeline (step ``segment``; 0 is the first plan's): the
    records the reference gives each version there, and those that reached the output from it
    (first copies of right records)."""

    model_config = ConfigDict(extra="forbid")

    segment: int
    rule: str
    expected: dict[str, int] = {}
    forwarded: dict[str, int] = {}


class Verdict(OutputCounts):
    """The checker's counts; ``reasons`` is empty exactly when the output is right."""

    unreadable: int = 0
    pinned: list[str] = []       # boundaries a partition moved (pinned), as notes
    lost_samples: list[int] = []
    # the first few records of each other failure, as "n=.. p.. t=.. ..." lines
    samples: list[str] = []
    suspects: list[int] = []     # events of those failures (their partitions are dumped)
    steps: list[StepCount] = []
    reasons: list[str] = []


class Timeline:
    """One partition's rules: ``rules[i]`` from ``bounds[i - 1]`` on. Boundary ``i`` (from 1)
    hands keys over from the versions in ``givers[i]``."""

    def __init__(self, first: KeyRule, changes: list[tuple[int, KeyRule]]) -> None:
        self.bounds = [b for b, _ in changes]
        self.rules = [first, *(r for _, r in changes)]
        self.givers: list[frozenset[str]] = [frozenset()] + [
            frozenset(h.old for h in handovers(a, b))
            for a, b in zip(self.rules, self.rules[1:], strict=False)]
        self.per_key = any(r.canary is not None for r in self.rules)

    def segment(self, t: int) -> int:
        return bisect.bisect_right(self.bounds, t)

    def owner(self, t: int, bucket: int | None) -> str:
        """The primary at ``t`` of a record in ``bucket`` (None: without a key)."""
        return self.rules[self.segment(t)].owner(bucket)

    def primary_at(self, t: int) -> str:
        """The primary at ``t`` of a record without a key (of every record, without a canary)."""
        return self.rules[self.segment(t)].primary

    def crossed(self, t: int, top: int) -> bool:
        """Whether some boundary B has t < B <= top (a record at t after one at top)."""
        i = bisect.bisect_right(self.bounds, t)
        return i < len(self.bounds) and self.bounds[i] <= top

    def moves_at(self, t: int, bucket: int | None) -> list[int]:
        """The boundaries ``i`` at or below ``t`` where a record in ``bucket`` changes
        primary."""
        return [i for i in range(1, self.segment(t) + 1)
                if self.rules[i - 1].owner(bucket) != self.rules[i].owner(bucket)]


def timelines(plans: list[CutoverPlan], reported: dict[tuple[int, int], int],
              partitions: int) -> tuple[dict[int, Timeline], list[str]]:
    """Each partition's timeline from the plans published (each adds one segment) and the
    boundaries the partitions reported; notes for every boundary that a partition moved."""
    ordered = sorted({p.epoch: p for p in plans}.values(), key=lambda p: p.epoch)
    out: dict[int, Timeline] = {}
    notes: list[str] = []
    for part in range(partitions):
        changes: list[tuple[int, KeyRule]] = []
        for plan in ordered[1:]:
            seg = plan.segments[-1]
            assert seg.from_event_time is not None
            b = reported.get((part, plan.epoch), seg.from_event_time)
            if b != seg.from_event_time:
                notes.append(f"p{part} epoch {plan.epoch}: boundary pinned "
                             f"{b - seg.from_event_time:+d} ms")
            changes.append((b, seg.rule))
        out[part] = Timeline(ordered[0].segments[0].rule, changes)
    return out, notes


class _Order:
    """The ordered-handover check of one partition, fed its output records in order."""

    def __init__(self, line: Timeline) -> None:
        self.line = line
        self.top: int | None = None
        # boundaries (index) that a record of a key moving there has crossed: their givers
        self.latched: dict[int, frozenset[str]] = {}

    def violates(self, r: OutRecord, bucket: int | None) -> bool:
        """Record ``r`` (in ``bucket``) comes next: does it break the order?"""
        line = self.line
        if not line.per_key:   # every key moves at every boundary (checked faster)
            bad = self.top is not None and line.crossed(r.t, self.top)
            self.top = r.t if self.top is None else max(self.top, r.t)
            return bad
        bad = any(r.t < line.bounds[i - 1] and r.version in givers
                  for i, givers in self.latched.items())
        for i in line.moves_at(r.t, bucket):
            self.latched.setdefault(i, line.givers[i])
        return bad


def verify(events: dict[int, Event], delivered: dict[str, set[int]], plans: list[CutoverPlan],
           log: OutputLog) -> Verdict:
    """Count the output against the reference and give every failure a reason."""
    lines, notes = timelines(plans, log.reported, len(log.records))
    v = Verdict(pinned=notes, unreadable=log.unreadable)
    buckets: dict[bytes, int] = {}

    def bucket(n: int) -> int | None:
        key = event_key(events[n])
        if key is None:
            return None
        b = buckets.get(key)
        if b is None:
            b = buckets[key] = key_bucket(key)
        return b

    steps = [StepCount(segment=0, rule=lines[0].rules[0].describe())] if lines else []
    steps += [StepCount(segment=i, rule=rule.describe())
              for i, rule in enumerate(lines[0].rules[1:] if lines else [], start=1)]
    expected: dict[int, str] = {}
    for e in events.values():
        line = lines[e.partition]
        version = line.owner(e.t, bucket(e.n))
        if e.n in delivered.get(version, set()):
            expected[e.n] = version
            step = steps[line.segment(e.t)].expected
            step[version] = step.get(version, 0) + 1
    v.expected = len(expected)
    seen: Counter[int] = Counter()
    wrong: list[tuple[int, str]] = []
    dup: list[tuple[int, str]] = []
    disorder: list[tuple[int, str]] = []
    for p, records in log.records.items():
        order = _Order(lines[p])
        for r in records:
            v.forwarded += 1
            ev = events.get(r.n)
            if ev is None or ev.partition != p or ev.t != r.t:
                v.unexpected += 1
                continue
            b = bucket(r.n)
            if expected.get(r.n) != r.version:
                v.wrong_version += 1
                wrong.append(_sample(r, p, b, f"expected {expected.get(r.n)}"))
                continue
            seen[r.n] += 1
            if seen[r.n] == 1:
                step = steps[lines[p].segment(r.t)].forwarded
                step[r.version] = step.get(r.version, 0) + 1
            else:
                dup.append(_sample(r, p, b, f"copy {seen[r.n]}"))
            if order.violates(r, b):
                v.order_violations += 1
                disorder.append(_sample(r, p, b, "below a boundary, after a record at or "
                                        "above it of a key that moves there"))
    missing = sorted(n for n in expected if seen[n] == 0)
    v.lost, v.lost_samples = len(missing), missing[:10]
    v.duplicated = sum(c - 1 for c in seen.values() if c > 1)
    v.steps = steps
    shown = wrong[:10] + dup[:10] + disorder[:10]
    v.samples = [line for _, line in shown]
    v.suspects = sorted({n for n, _ in shown})
    for name in ("lost", "duplicated", "wrong_version", "unexpected", "order_violations",
                 "unreadable"):
        if getattr(v, name):
            v.reasons.append(f"{getattr(v, name)} {name.replace('_', ' ')}")
    return v


def _sample(r: OutRecord, p: int, bucket: int | None, what: str) -> tuple[int, str]:
    return r.n, (f"n={r.n} p{p} t={r.t} by {r.version} "
                 f"{'no key' if bucket is None else f'bucket {bucket}'}: {what}")
