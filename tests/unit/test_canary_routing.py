"""The routing rule with a per-key canary (router.rule.decision), over generated streams: every
(key, event time) reaches the output once, from exactly the version the plan names for that
key and time (pinned above the horizon when the plan comes late); with ordered handover a key
that changes primary at a boundary gets nothing at or above it before every version giving
keys away there has passed it; the rule's frozen hold rule (router.rule.held_bound) agrees with
every decision; a restart from a stored snapshot decides as the run it replaces.

The streams are test_properties' (two versions, micro-batches, watermarks, heartbeats, replays
after crashes, a poison record), with keys k1..k6 and records without a key."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rule_support import SetStore
from test_properties import (
    FAR,
    POISON,
    POISON_T,
    WRITTEN,
    Item,
    new_router,
    version_delivery,
)

from cutover.key_bucket import BUCKETS, key_bucket
from cutover.key_primary import KeyRule
from cutover.plan import CutoverPlan
from router.rule.decision import Decision, Incoming, Outcome, PartitionRouter, PartitionSnapshot

KEYLESS = 0  # key index 0 stands for a record without a key
# shares that split k1..k6 (buckets 573, 4547, 4656, 8591, 8592, 9966) every way, and others
SHARES = st.sampled_from([1, 574, 4548, 4657, 8592, 8593, 9967, BUCKETS]) | st.integers(1, BUCKETS)


def key_of(k: int) -> bytes | None:
    return None if k == KEYLESS else b"k%d" % k


def without_key_zero(recs: list[Incoming]) -> list[Incoming]:
    for rec in recs:
        if rec.key == b"k0":
            rec.key = None
            rec.ref = Item(rec.ref.version, None, rec.ref.t, rec.ref.value)  # type: ignore[arg-type]
    return recs


def seg(t: int | None, primary: str, canary: str | None = None, buckets: int = 0) -> dict:
    out: dict = {"from_event_time": t, "primary": primary}
    if canary is not None:
        out["canary"] = {"version": canary, "share": buckets / BUCKETS}
    return out


@st.composite
def canary_switches(draw: st.DrawFn) -> CutoverPlan:
    """blue, then a canary of green from T1; maybe then at T2 a wider share, every key to
    green, or a rollback to blue."""
    t1 = draw(st.integers(0, 320))
    s1 = draw(SHARES)
    segments = [seg(None, "blue"), seg(t1, "blue", "green", s1)]
    step = draw(st.sampled_from(["none", "grow", "finish", "rollback"]))
    t2 = t1 + draw(st.integers(1, 100))
    if step == "grow" and s1 < BUCKETS:
        segments.append(seg(t2, "blue", "green", draw(st.integers(s1 + 1, BUCKETS))))
    elif step == "finish":
        segments.append(seg(t2, "green"))
    elif step == "rollback":
        segments.append(seg(t2, "blue"))
    return CutoverPlan.model_validate({"route": "r", "epoch": 2, "segments": segments})


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    items = sorted(draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 300)),
                                 min_size=1, max_size=60, unique=True)), key=lambda kt: kt[1])
    same = [False] * len(items)
    rnd = random.Random(draw(st.integers(0, 2**32)))
    blue = without_key_zero(version_delivery(items, "blue", same, rnd))
    green = without_key_zero(version_delivery(items, "green", same, rnd))
    merged: list[Incoming] = []
    while blue or green:
        src = blue if (blue and (not green or rnd.random() < 0.5)) else green
        merged.append(src.pop(0))
    if draw(st.booleans()):
        v = draw(st.sampled_from(["blue", "green"]))
        poison = Item(v, b"kp", POISON_T, POISON)
        merged.insert(draw(st.integers(0, len(merged))),
                      Incoming(v, POISON_T, None, poison.key, poison.value, ref=poison,
                               written_at=WRITTEN))
    p1 = draw(st.integers(0, len(merged)))
    p2 = draw(st.integers(p1, len(merged)))
    return {"items": items, "merged": merged, "plan": draw(canary_switches()), "p1": p1,
            "p2": p2, "ordered": draw(st.booleans()),
            "identity": draw(st.sampled_from(["record", "key_event_time"]))}


def events_of(sc: dict) -> list[Incoming | CutoverPlan]:
    blue = CutoverPlan.model_validate({"route": "r", "epoch": 1, "segments": [seg(None, "blue")]})
    plans = [(sc["p1"], blue), (sc["p2"], sc["plan"])]
    events: list[Incoming | CutoverPlan] = []
    for i, rec in enumerate([*sc["merged"], None]):
        events.extend(p for at, p in plans if at == i)
        if rec is not None:
            events.append(rec)
    events.append(Incoming("blue", None, FAR, heartbeat=True))
    events.append(Incoming("green", None, FAR, heartbeat=True))
    return events


def step(r: PartitionRouter, ev: Incoming | CutoverPlan) -> list[Decision]:
    if isinstance(ev, CutoverPlan):
        return r.apply_plan(ev)
    if ev.heartbeat:
        return r.observe(ev)
    # the hold rule frozen now must say exactly which data records the rule holds
    rule = r.hold_rule()
    out = r.observe(ev)
    held = out[0].outcome in (Outcome.HOLD, Outcome.OVER_BOUND)
    assert rule.holds(ev.version, ev.event_time, ev.written_at, ev.key) == held  # type: ignore[arg-type]
    return out


def horizon_at_plan(sc: dict) -> int | None:
    before = [rec.event_time for rec in sc["merged"][: sc["p2"]]
              if not rec.heartbeat and rec.value != POISON]
    return max(before) if before else None  # type: ignore[type-var]


def givers(a: KeyRule, b: KeyRule) -> set[str]:
    return {a.owner(x) for x in [*range(BUCKETS), None] if a.owner(x) != b.owner(x)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_key_and_time_is_forwarded_once_from_the_version_the_plan_names(sc: dict) -> None:
    r = new_router(sc)
    forwarded: list[Item] = []
    for ev in events_of(sc):
        forwarded += [d.record.ref for d in step(r, ev) if d.outcome is Outcome.FORWARD]
    assert r.held == []

    plan: CutoverPlan = sc["plan"]
    h = horizon_at_plan(sc)

    def primary(k: int, t: int) -> str:  # pinned: at or below the horizon, blue decided it
        return "blue" if h is not None and t <= h else plan.primary_for(key_of(k), t)

    assert Counter((i.key, i.t, i.version) for i in forwarded) == Counter(
        (key_of(k), t, primary(k, t)) for k, t in sc["items"])

    if sc["ordered"] and (h is None or h < plan.boundaries[0]):  # the plan's own boundaries
        rules = [s.rule for s in plan.segments]
        for b, (before, after) in enumerate(pairwise(rules)):
            boundary, giving = plan.boundaries[b], givers(before, after)
            for n, x in enumerate(forwarded):
                bucket = None if x.key is None else key_bucket(x.key)
                if x.t < boundary or before.owner(bucket) == after.owner(bucket):
                    continue
                late = [y for y in forwarded[n + 1:] if y.t < boundary and y.version in giving]
                assert not late, f"{late[0]} below {boundary} came after {x}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_a_restart_from_a_stored_snapshot_decides_as_the_run_it_replaces(
        sc: dict, data: st.DataObject) -> None:
    events = events_of(sc)
    for i, ev in enumerate(events):
        if isinstance(ev, Incoming):
            events[i] = Incoming(ev.version, ev.event_time, ev.watermark, ev.key, ev.value,
                                 ev.heartbeat, ref=(i, ev.ref), written_at=ev.written_at)
    r = new_router(sc)
    per_event: list[list[tuple[Outcome, object]]] = []
    checkpoints = []
    for ev in events:
        held_from = min((h.ref[0] for h in r.held), default=len(per_event))
        stored = PartitionSnapshot.model_validate_json(r.snapshot().model_dump_json())
        checkpoints.append((stored, SetStore(r.store), held_from))
        per_event.append([(d.outcome, d.record.ref) for d in step(r, ev)])

    k = data.draw(st.integers(0, len(events) - 1), label="recovery point")
    snap, store, resume = checkpoints[k]
    r2 = new_router(sc, store)
    r2.restore(snap)
    replayed = [[(d.outcome, d.record.ref) for d in step(r2, ev)] for ev in events[resume:]]
    assert replayed[k - resume:] == per_event[k:]
    assert r2.snapshot() == r.snapshot()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_data_paths_two_calls_decide_a_canary_as_observe(sc: dict) -> None:
    slow, fast = new_router(sc), new_router(sc)
    for ev in events_of(sc):
        a = [(d.outcome, d.record.ref, d.reason) for d in step(slow, ev)]
        if isinstance(ev, CutoverPlan) or ev.heartbeat:
            b = [(d.outcome, d.record.ref, d.reason) for d in step(fast, ev)]
        elif fast.suppresses(ev.version, ev.event_time, ev.written_at):  # type: ignore[arg-type]
            b = [(Outcome.SUPPRESS, ev.ref, None)]
        else:
            b = [(d.outcome, d.record.ref, d.reason) for d in [fast.decide(ev)]]
        assert a == b
        assert fast.snapshot() == slow.snapshot() and fast.counters == slow.counters
