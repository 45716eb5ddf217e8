"""The soak's checker can fail: loss, duplicates, a wrong version, records out of order at a
boundary and a pinned boundary are each seen (a checker that always passes proves nothing); with
a per-key canary, the wrong version for a key and the order of the keys that move too."""

from __future__ import annotations

import copy
import random

from cutover.key_bucket import key_bucket
from cutover.plan import CutoverPlan
from tests.soak.checker import OutputLog, OutRecord, _Order, timelines, verify
from tests.soak.plans import canary_steps, first_plan, next_switch
from tests.soak.workload import Event, event_key

T0 = 1_000_000


def _plans() -> list[CutoverPlan]:
    one = first_plan("r")
    two = next_switch(one, T0 + 50)       # green from T0 + 50
    return [one, two, next_switch(two, T0 + 80)]   # blue again from T0 + 80


def _events() -> dict[int, Event]:
    return {n: Event(n, n % 2, T0 + n) for n in range(100)}


def _right_output(events: dict[int, Event]) -> OutputLog:
    log = OutputLog(records={0: [], 1: []}, arrived_at={0: [], 1: []})
    for e in events.values():
        version = "green" if T0 + 50 <= e.t < T0 + 80 else "blue"
        log.records[e.partition].append(OutRecord(n=e.n, t=e.t, version=version))
    return log


def _all(events: dict[int, Event]) -> dict[str, set[int]]:
    return {"blue": set(events), "green": set(events)}


def test_the_right_output_passes() -> None:
    events = _events()
    v = verify(events, _all(events), _plans(), _right_output(events))
    assert v.reasons == [] and v.expected == v.forwarded == 100


def test_loss_duplicates_wrong_version_and_disorder_are_each_counted() -> None:
    events = _events()
    log = _right_output(events)
    p0 = log.records[0]
    del p0[3]                                        # n=6 lost
    p0.insert(1, p0[0])                              # n=0 twice
    p0[10] = OutRecord(n=p0[10].n, t=p0[10].t, version="green")   # n=20: green at blue's time
    moved = p0.pop(20)                               # n=40 (below T0+50) after n=54 ...
    p0.insert(27, moved)                             # ... which is above it: out of order
    assert [r.n for r in p0[24:28]] == [50, 52, 54, 40]
    v = verify(events, _all(events), _plans(), log)
    assert (v.lost, v.duplicated, v.wrong_version, v.order_violations) == (2, 1, 1, 1)
    assert v.lost_samples == [6, 20]   # n=20 was replaced by the wrong copy
    assert len(v.reasons) == 4


def test_a_version_copy_the_broker_never_took_is_not_expected() -> None:
    events = _events()
    log = _right_output(events)
    log.records[0] = [r for r in log.records[0] if r.n != 4]
    v = verify(events, {"blue": set(events) - {4}, "green": set(events)}, _plans(), log)
    assert v.reasons == [] and v.expected == 99


def test_a_pinned_boundary_reported_on_the_status_topic_decides_its_partition() -> None:
    events = _events()
    log = _right_output(events)
    # Partition 0 applied epoch 2 late: its boundary moved from T0+50 to T0+60, so its events
    # at T0+50..T0+59 stay blue there.
    log.reported[(0, 2)] = T0 + 60
    log.records[0] = [OutRecord(n=r.n, t=r.t, version="blue") if r.t < T0 + 60 else r
                      for r in log.records[0]]
    v = verify(events, _all(events), _plans(), log)
    assert v.reasons == []
    assert v.pinned == ["p0 epoch 2: boundary pinned +10 ms"]
    log.reported.clear()
    assert verify(events, _all(events), _plans(), log).wrong_version == 5


# -- a per-key canary -------------------------------------------------------------------------
# blue; from T0+50 green has 5% of the keys; from T0+100 25%; from T0+150 green has every key.
# Every seventh event has no key: it follows the segment's primary.

B1, B2, B3 = T0 + 50, T0 + 100, T0 + 150


def _canary_plans() -> list[CutoverPlan]:
    plans = [first_plan("r")]
    for b, step in zip((B1, B2, B3), canary_steps("green:5%", "green:25%", "green"), strict=True):
        plans.append(next_switch(plans[-1], b, step))
    return plans


def _canary_events() -> dict[int, Event]:
    return {n: Event(n, n % 2, T0 + n, keyed=n % 7 != 6) for n in range(200)}


def _canary_version(e: Event) -> str:
    """The reference, written out without cutover.key_primary: the first 500 (then 2,500) of
    the 10,000 buckets are green's."""
    key = event_key(e)
    share = 0 if e.t < B1 else 500 if e.t < B2 else 2500 if e.t < B3 else 10_000
    if key is None:
        return "green" if share == 10_000 else "blue"
    return "green" if key_bucket(key) < share else "blue"


def _canary_output(events: dict[int, Event]) -> OutputLog:
    log = OutputLog(records={0: [], 1: []}, arrived_at={0: [], 1: []})
    for e in events.values():
        log.records[e.partition].append(OutRecord(n=e.n, t=e.t, version=_canary_version(e)))
    return log


def _where(events: dict[int, Event], lo: int, hi: int, buckets: range | None,
           partition: int = 0) -> int:
    """The first event of ``partition`` in event times [lo, hi) whose key's bucket is in
    ``buckets`` (None: without a key)."""
    for e in events.values():
        if e.partition != partition or not lo <= e.t < hi:
            continue
        key = event_key(e)
        if (key is None and buckets is None) or (
                key is not None and buckets is not None and key_bucket(key) in buckets):
            return e.n
    raise AssertionError(f"no event in [{lo}, {hi}) with buckets {buckets}")


def _move_after(log: OutputLog, n: int, after: int, partition: int = 0) -> None:
    records = log.records[partition]
    moved = records.pop(next(i for i, r in enumerate(records) if r.n == n))
    records.insert(next(i for i, r in enumerate(records) if r.n == after) + 1, moved)


def test_a_canary_s_right_output_passes_with_each_version_primary_in_each_step() -> None:
    events = _canary_events()
    v = verify(events, _all(events), _canary_plans(), _canary_output(events))
    assert v.reasons == [] and v.expected == v.forwarded == 200
    assert [s.rule for s in v.steps] == [
        "primary 'blue'", "primary 'blue', canary 'green' at 0.05",
        "primary 'blue', canary 'green' at 0.25", "primary 'green'"]
    for step in v.steps[1:3]:   # both versions are primary for some keys in the canary steps
        assert step.forwarded["green"] > 0 and step.forwarded["blue"] > 0
        assert step.forwarded == step.expected
    assert set(v.steps[0].forwarded) == {"blue"} and set(v.steps[3].forwarded) == {"green"}


def test_the_wrong_version_for_a_key_or_for_a_record_without_one_is_counted() -> None:
    events = _canary_events()
    log = _canary_output(events)
    canary_key = _where(events, B1, B2, range(500))          # green's at 5%
    keyless = _where(events, B1, B3, None)                   # blue's until the full switch
    other_key = _where(events, B2, B3, range(2500, 10_000))  # blue's at 25%
    flip = {canary_key: "blue", keyless: "green", other_key: "green"}
    log.records[0] = [OutRecord(r.n, r.t, flip.get(r.n, r.version)) for r in log.records[0]]
    v = verify(events, _all(events), _canary_plans(), log)
    assert (v.wrong_version, v.lost) == (3, 3)
    assert len(v.samples) == 3 and v.suspects == sorted(flip)


def test_order_at_a_canary_boundary_is_checked_for_the_keys_that_move() -> None:
    events = _canary_events()
    moved = _where(events, B2, B3, range(500, 2500))     # blue's below B2, green's from B2
    stays_green = _where(events, B1, B2, range(500))      # green's on both sides of B2
    stays_blue = _where(events, B2, B3, range(2500, 10_000))   # blue's on both sides of B2
    blue_below = _where(events, B1, B2, range(2500, 10_000))

    def violations(n: int, after: int) -> int:
        log = _canary_output(events)
        _move_after(log, n, after)
        v = verify(events, _all(events), _canary_plans(), log)
        assert v.lost == v.duplicated == v.wrong_version == 0
        return v.order_violations

    # a record of blue (the version giving keys away at B2) below B2 after a moved key's
    # record from B2: the order the ordered handover promises is broken
    assert violations(blue_below, after=moved) == 1
    # a key that does not move at B2 keeps its version's own order: green's record below B2
    # after a moved key's record above it, or blue's below B2 after blue's own above it
    assert violations(stays_green, after=moved) == 0
    assert violations(blue_below, after=stays_blue) == 0


def test_for_whole_switches_the_per_key_order_check_is_the_partition_s() -> None:
    """Every key moves at a whole switch and the one giver is the old primary, so the per-key
    rule ("a moved key's record follows the givers' records below the boundary") says exactly
    "no record below a boundary after one at or above it": both checks agree on any order."""
    rng = random.Random(7)
    lines, _ = timelines(_plans(), {}, 1)
    records = [OutRecord(n, T0 + n, lines[0].owner(T0 + n, None)) for n in range(0, 100, 3)]
    found = 0
    for _ in range(300):
        shuffled = records[:]
        for _ in range(rng.randrange(1, 4)):   # a few records moved out of place
            moved = shuffled.pop(rng.randrange(len(shuffled)))
            shuffled.insert(rng.randrange(len(shuffled)), moved)
        fast, per_key = _Order(lines[0]), _Order(lines[0])
        per_key.line = copy.copy(lines[0])
        per_key.line.per_key = True
        for r in shuffled:
            bucket = rng.randrange(10_000) if rng.random() < 0.9 else None
            bad = fast.violates(r, bucket)
            assert bad == per_key.violates(r, bucket)
            found += bad
    assert found > 50
