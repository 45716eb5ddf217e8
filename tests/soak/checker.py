"""The checker: reads the output with ``read_committed`` all along and verifies every record.

The reference, computed without the router: event ``n`` (partition ``p``, event time ``t``)
must be on output partition ``p`` exactly once, in the copy of ``primary_p(t)``, when that
version's copy was acknowledged by the broker. ``primary_p`` is the timeline of the plans
published, each plan's new boundary taken as partition ``p`` reported it on the status topic
when it applied that epoch (its pinned boundary, DESIGN.md "Routing rule"), else as published.
Ordered handover: at every boundary of a partition, no record below it follows one at or above
it.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from cutover.headers import EVENT_TIME
from cutover.plan import CutoverPlan
from cutover.status import RouteStatus, parse_status
from router.base.kafka_io import base_conf, reader_conf
from tests.output_counts import OutputCounts
from tests.soak.workload import Event, parse_value

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


class Verdict(OutputCounts):
    """The checker's counts; ``reasons`` is empty exactly when the output is right."""

    unreadable: int = 0
    pinned: list[str] = []       # boundaries a partition moved (pinned), as notes
    lost_samples: list[int] = []
    reasons: list[str] = []


class Timeline:
    """One partition's primaries: ``primaries[i]`` from ``bounds[i - 1]`` on."""

    def __init__(self, first: str, changes: list[tuple[int, str]]) -> None:
        self.bounds = [b for b, _ in changes]
        self.primaries = [first, *(v for _, v in changes)]

    def primary_at(self, t: int) -> str:
        return self.primaries[bisect.bisect_right(self.bounds, t)]

    def crossed(self, t: int, top: int) -> bool:
        """Whether some boundary B has t < B <= top (a record at t after one at top)."""
        i = bisect.bisect_right(self.bounds, t)
        return i < len(self.bounds) and self.bounds[i] <= top


def timelines(plans: list[CutoverPlan], reported: dict[tuple[int, int], int],
              partitions: int) -> tuple[dict[int, Timeline], list[str]]:
    """Each partition's timeline from the plans published (each adds one boundary) and the
    boundaries the partitions reported; notes for every boundary that a partition moved."""
    ordered = sorted({p.epoch: p for p in plans}.values(), key=lambda p: p.epoch)
    out: dict[int, Timeline] = {}
    notes: list[str] = []
    for part in range(partitions):
        changes: list[tuple[int, str]] = []
        for plan in ordered[1:]:
            seg = plan.segments[-1]
            assert seg.from_event_time is not None
            b = reported.get((part, plan.epoch), seg.from_event_time)
            if b != seg.from_event_time:
                notes.append(f"p{part} epoch {plan.epoch}: boundary pinned "
                             f"{b - seg.from_event_time:+d} ms")
            changes.append((b, seg.primary))
        out[part] = Timeline(ordered[0].segments[0].primary, changes)
    return out, notes


def verify(events: dict[int, Event], delivered: dict[str, set[int]], plans: list[CutoverPlan],
           log: OutputLog) -> Verdict:
    """Count the output against the reference and give every failure a reason."""
    lines, notes = timelines(plans, log.reported, len(log.records))
    v = Verdict(pinned=notes, unreadable=log.unreadable)
    expected: dict[int, str] = {}
    for e in events.values():
        version = lines[e.partition].primary_at(e.t)
        if e.n in delivered.get(version, set()):
            expected[e.n] = version
    v.expected = len(expected)
    seen: Counter[int] = Counter()
    for p, records in log.records.items():
        top: int | None = None
        for r in records:
            v.forwarded += 1
            ev = events.get(r.n)
            if ev is None or ev.partition != p or ev.t != r.t:
                v.unexpected += 1
                continue
            if expected.get(r.n) != r.version:
                v.wrong_version += 1
                continue
            seen[r.n] += 1
            if top is not None and lines[p].crossed(r.t, top):
                v.order_violations += 1
            top = r.t if top is None else max(top, r.t)
    missing = sorted(n for n in expected if seen[n] == 0)
    v.lost, v.lost_samples = len(missing), missing[:10]
    v.duplicated = sum(c - 1 for c in seen.values() if c > 1)
    for name in ("lost", "duplicated", "wrong_version", "unexpected", "order_violations",
                 "unreadable"):
        if getattr(v, name):
            v.reasons.append(f"{getattr(v, name)} {name.replace('_', ' ')}")
    return v
