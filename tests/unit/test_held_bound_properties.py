"""Over ``max_held`` a partition keeps the bound and decides exactly as without one.

The generated streams of test_properties (two versions, replays, heartbeats, plans, a poison
record) are read as one raw partition, the way router.worker.datapath reads it with
router.rule.held_bound: records the rule would hold past ``max_held`` are not kept, and when the
rule changes the consumer seeks back to the first of them and reads again, deciding again
only the records not kept (records fetched before the seek arrive first and are ignored).
Plans arrive when the reading first reaches their place, and wait while records not kept are
read again (as router.worker.datapath makes them wait). The decisions other than HOLD must be
the unbounded run's, in the same order, and the held list never exceeds the bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rule_support import SetStore, make_plan
from test_properties import TOLERANCE, events_of, scenarios

from cutover.plan import CutoverPlan
from router.rule.decision import Decision, Incoming, Outcome, PartitionRouter
from router.rule.held_bound import HeldBound, Pass
from router.rule.identity import identity_function

TOPIC = "raw"


def partition(records: list, max_held: int, sc: dict) -> PartitionRouter:
    return PartitionRouter(0, identity=identity_function(sc["identity"]), store=SetStore(),
                           retention_ms=10**9, ordered=sc["ordered"], max_held=max_held,
                           future_tolerance_ms=TOLERANCE)


@dataclass
class Reader:
    """One raw partition read as the data path reads it."""

    records: list[Incoming]
    plans_before: dict[int, list[CutoverPlan]]
    router: PartitionRouter
    prefetch: int
    bound: HeldBound = field(default_factory=HeldBound)
    decided: list[tuple[Outcome, object]] = field(default_factory=list)
    most_held: int = 0
    rewinds: int = 0

    def act(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if d.outcome is Outcome.OVER_BOUND:
                self.bound.drop(TOPIC, d.record.ref[0], 0, self.router.hold_rule(),
                                self.router.rule_changes)
            elif d.outcome is not Outcome.HOLD:
                self.decided.append((d.outcome, d.record.ref))
        self.most_held = max(self.most_held, len(self.router.held))

    def rewind_to(self, pos: int) -> int | None:
        b = self.bound
        if not b.dropping or self.router.rule_changes == b.rule_seen:
            return None
        seeks = b.rewind({TOPIC: pos})
        assert [s.topic for s in seeks] == [TOPIC]
        self.rewinds += 1
        for stale in range(pos, min(pos + self.prefetch, len(self.records))):
            assert b.place(TOPIC, stale) is Pass.STALE
        return seeks[0].offset

    def run(self) -> None:
        pos, frontier = 0, 0
        while pos < len(self.records):
            plans = self.plans_before.get(pos, []) if pos == frontier else []
            back = None
            while plans and back is None and not self.bound.rewinding({TOPIC: pos}):
                self.act(self.router.apply_plan(plans.pop(0)))
                back = self.rewind_to(pos)
            if back is not None:
                pos = back
                continue
            off, rec = pos, self.records[pos]
            pos += 1
            frontier = max(frontier, pos)
            if TOPIC in self.bound.topics:
                where = self.bound.place(TOPIC, off)
                assert where is not Pass.STALE
                if where is Pass.AGAIN and not (
                        not rec.heartbeat and rec.error is None
                        and self.bound.dropped(TOPIC, off, rec.version, rec.event_time,
                                               rec.written_at)):
                    continue
            self.act(self.router.observe(rec))
            back = self.rewind_to(pos)
            if back is not None:
                pos = back


def read(sc: dict, max_held: int, prefetch: int, extra: list) -> Reader:
    records: list[Incoming] = []
    plans_before: dict[int, list[CutoverPlan]] = {}
    for ev in events_of(sc, extra):
        if isinstance(ev, CutoverPlan):
            plans_before.setdefault(len(records), []).append(ev)
        else:
            records.append(Incoming(ev.version, ev.event_time, ev.watermark, ev.key, ev.value,
                                    ev.heartbeat, ref=(len(records), ev.ref),
                                    written_at=ev.written_at))
    reader = Reader(records, plans_before, partition(records, max_held, sc), prefetch)
    reader.run()
    return reader


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(1, 6), st.integers(0, 4), st.data())
def test_bounded_partition_decides_as_the_unbounded_one(sc: dict, max_held: int,
                                                        prefetch: int, data) -> None:
    extra = []
    if data.draw(st.booleans(), label="rollback"):

        at = data.draw(st.integers(sc["p2"], len(sc["merged"])), label="rollback_at")
        t = data.draw(st.integers(sc["boundary"] + 1, 400), label="rollback_t")
        extra = [(at, make_plan(3, (None, "blue"), (sc["boundary"], "green"), (t, "blue")))]
    free = read(sc, 10**6, 0, extra)
    bounded = read(sc, max_held, prefetch, extra)
    assert bounded.most_held <= max_held
    assert bounded.decided == free.decided
    assert bounded.router.held == [] and free.router.held == []
    assert bounded.router.snapshot() == free.router.snapshot()
    c_free, c_bounded = free.router.counters, bounded.router.counters
    assert (c_bounded.forwarded, c_bounded.duplicates, c_bounded.dead_lettered,
            c_bounded.suppressed) == (c_free.forwarded, c_free.duplicates,
                                      c_free.dead_lettered, c_free.suppressed)
    if free.most_held > max_held:
        assert c_bounded.pauses >= 1 and bounded.rewinds >= 1


def test_a_rewind_that_still_holds_records_opens_a_window_inside_itself() -> None:
    """Two boundaries: the first closes and releases, the rewind reads records the second
    still holds, and the bound (1) drops one of them again: read a third time later."""
    sc = {"identity": "record", "ordered": True}

    def data(v: str, t: int) -> Incoming:
        return Incoming(v, t, None, b"k", b"%d" % t, written_at=1_000)

    def beat(v: str, wm: int) -> Incoming:
        return Incoming(v, None, wm, heartbeat=True)

    stream = [data("green", 150), data("green", 160), data("blue", 250), data("blue", 260),
              beat("blue", 150), beat("green", 300), data("green", 270)]
    two_bounds = make_plan(1, (None, "blue"), (100, "green"), (200, "blue"))
    runs = []
    for max_held in (10**6, 1):
        records = [Incoming(r.version, r.event_time, r.watermark, r.key, r.value, r.heartbeat,
                            ref=(i, r.event_time), written_at=r.written_at)
                   for i, r in enumerate(stream)]
        reader = Reader(records, {0: [two_bounds]}, partition(records, max_held, sc), 0)
        reader.run()
        runs.append(reader)
    free, bounded = runs
    assert bounded.rewinds == 2 and bounded.most_held == 1
    assert bounded.decided == free.decided
    assert [ref[1] for o, ref in bounded.decided if o is Outcome.FORWARD] == [
        150, 160, 250, 260]
    assert [ref[1] for o, ref in bounded.decided if o is Outcome.SUPPRESS] == [270]
