"""Properties of the routing rule over generated streams.

Each version emits the same logical input in micro-batches, as the tagger writes them: every
record of batch j carries the batch's watermark W_j, which records of batch j itself may be
below (append mode emits the windows that W_j closes), but no record of a later batch is; a
heartbeat carrying W_j follows the batch's data. Crashes replay whole batches, as Spark does.
The two versions' deliveries are interleaved arbitrarily and plans arrive at arbitrary points.
Every record is written at time WRITTEN; one stream in two also carries a poison record, of
either version, stamped far beyond that time plus the tolerance: it must be dead-lettered and
change nothing else.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rule_support import SetStore
from rule_support import make_plan as plan

from cutover.plan import CutoverPlan
from router.rule.decision import Decision, Incoming, Outcome, PartitionRouter
from router.rule.identity import identity_function

FAR = 10**9
WRITTEN = 1_000       # when every record was written to the raw topic (its Kafka timestamp)
TOLERANCE = 1_000     # every generated event time (0..300) is within it; the poison is not
POISON_T = 10**12     # were it to move the horizon, everything after would be dead-lettered
POISON = b"poison"


@dataclass(frozen=True)
class Item:
    version: str
    key: bytes
    t: int
    value: bytes


def version_delivery(items: list[tuple[int, int]], version: str, changed: list[bool],
                     rnd: random.Random) -> list[Incoming]:
    """One version's at-least-once delivery: batches, their watermarks and heartbeats, replays
    on crashes (a crash may come after a batch's data and before its heartbeat)."""
    recs = [Item(version, b"k%d" % k, t,
                 (f"{k}:{t}:" + ("new" if version == "green" and c else "same")).encode())
            for (k, t), c in zip(items, changed, strict=True)]
    cuts = sorted(rnd.sample(range(1, len(recs)), k=min(len(recs) - 1, rnd.randint(0, 6))))
    batches = [recs[a:b] for a, b in zip([0, *cuts], [*cuts, len(recs)], strict=True)]
    for b in batches:
        rnd.shuffle(b)  # order inside a micro-batch is free
    # W_j: at or above batch j's own records (it closes them), below every later batch's
    later = [min((i.t for b in batches[j + 1:] for i in b), default=FAR)
             for j in range(len(batches))]
    wms = [later[j] if later[j] != FAR else max(i.t for i in batches[j]) + 1
           for j in range(len(batches))]
    out: list[Incoming] = []
    done = 0
    while done < len(batches):  # crash after a random batch, restart from an earlier one
        crash = rnd.randint(done, len(batches) - 1)
        restart = rnd.randint(max(0, done - 2), done)
        for j in range(restart, crash + 1):
            out.extend(Incoming(i.version, i.t, wms[j], i.key, i.value, ref=i,
                                written_at=WRITTEN) for i in batches[j])
            if j < crash or rnd.random() < 0.5:  # the crash may lose the last heartbeat
                out.append(Incoming(version, None, wms[j], heartbeat=True))
        done = crash + 1
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    keys_times = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 300)),
                               min_size=1, max_size=60, unique=True))
    items = sorted(keys_times, key=lambda kt: kt[1])
    changed = draw(st.lists(st.booleans(), min_size=len(items), max_size=len(items)))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    blue = version_delivery(items, "blue", changed, rnd)
    green = version_delivery(items, "green", changed, rnd)
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
    boundary = draw(st.integers(0, 320))
    p1 = draw(st.integers(0, len(merged)))
    p2 = draw(st.integers(p1, len(merged)))
    return {"items": items, "changed": changed, "merged": merged, "boundary": boundary,
            "p1": p1, "p2": p2, "ordered": draw(st.booleans()),
            "identity": draw(st.sampled_from(["record", "key_event_time"]))}


def events_of(sc: dict, extra_plans: list[tuple[int, CutoverPlan]] = ()) -> list:
    plans = [(sc["p1"], plan(1, (None, "blue"))),
             (sc["p2"], plan(2, (None, "blue"), (sc["boundary"], "green"))),
             *extra_plans]
    events: list = []
    for i, rec in enumerate([*sc["merged"], None]):
        events.extend(p for at, p in plans if at == i)
        if rec is not None:
            events.append(rec)
    events.append(Incoming("blue", None, FAR, heartbeat=True))
    events.append(Incoming("green", None, FAR, heartbeat=True))
    return events


def new_router(sc: dict, store: set | None = None) -> PartitionRouter:
    return PartitionRouter(0, identity=identity_function(sc["identity"]),
                           store=store if store is not None else SetStore(),
                           retention_ms=FAR, ordered=sc["ordered"], max_held=10**6,
                           future_tolerance_ms=TOLERANCE)


def step(r: PartitionRouter, ev) -> list[Decision]:
    return r.apply_plan(ev) if isinstance(ev, CutoverPlan) else r.observe(ev)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_forwarded_set_is_the_reference_exactly_once(sc: dict) -> None:
    r = new_router(sc)
    forwarded: list[Item] = []
    dead: list[Item] = []
    for ev in events_of(sc):
        decisions = step(r, ev)
        forwarded += [d.record.ref for d in decisions if d.outcome is Outcome.FORWARD]
        dead += [d.record.ref for d in decisions if d.outcome is Outcome.DEAD_LETTER]
    assert r.held == []
    assert dead == [rec.ref for rec in sc["merged"] if rec.value == POISON]

    # The effective boundary, computed independently: the horizon when the switch arrived is
    # the largest event time delivered before it (every earlier record was decided by then).
    before = [rec.event_time for rec in sc["merged"][: sc["p2"]]
              if not rec.heartbeat and rec.value != POISON]
    horizon = max(before) if before else None
    boundary = sc["boundary"] if horizon is None or sc["boundary"] > horizon else horizon + 1
    expected = Counter()
    for (k, t), c in zip(sc["items"], sc["changed"], strict=True):
        v = "blue" if t < boundary else "green"
        tag = "new" if v == "green" and c else "same"
        expected[Item(v, b"k%d" % k, t, f"{k}:{t}:{tag}".encode())] += 1
    assert Counter(forwarded) == expected

    if sc["ordered"]:
        crossed = False
        for item in forwarded:
            if item.t >= boundary:
                crossed = True
            assert not (crossed and item.t < boundary), "a record below the boundary came late"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_replay_from_any_recovery_point_gives_the_same_decisions(sc: dict, data) -> None:
    rollback_at = data.draw(st.integers(sc["p2"], len(sc["merged"])), label="rollback_at")
    rollback_t = data.draw(st.integers(sc["boundary"] + 1, 400), label="rollback_t")
    extra = [(rollback_at, plan(3, (None, "blue"), (sc["boundary"], "green"),
                                (rollback_t, "blue"))),
             (rollback_at, plan(1, (None, "green")))]  # a stale replay of an old epoch
    events = events_of(sc, extra)
    for i, ev in enumerate(events):
        if isinstance(ev, Incoming):
            events[i] = Incoming(ev.version, ev.event_time, ev.watermark, ev.key, ev.value,
                                 ev.heartbeat, ref=(i, ev.ref), written_at=ev.written_at)

    r = new_router(sc)
    per_event: list[list[tuple[Outcome, object]]] = []
    checkpoints = []
    for ev in events:
        # What the router persists at a commit: the snapshot and the store; the position it
        # commits is that of the earliest held record.
        held_from = min((h.ref[0] for h in r.held), default=len(per_event))
        checkpoints.append((r.snapshot(), SetStore(r.store), held_from))
        per_event.append([(d.outcome, d.record.ref) for d in step(r, ev)])

    k = data.draw(st.integers(0, len(events) - 1), label="recovery point")
    snap, store, resume = checkpoints[k]
    r2 = new_router(sc, store)
    r2.restore(snap)
    replayed: list[list[tuple[Outcome, object]]] = []
    for ev in events[resume:]:
        replayed.append([(d.outcome, d.record.ref) for d in step(r2, ev)])

    assert replayed[k - resume:] == per_event[k:], "decisions after the recovery point differ"

    def forwarded(rows: list[list[tuple[Outcome, object]]]) -> Counter:
        return Counter(ref[1] for row in rows for o, ref in row if o is Outcome.FORWARD)

    before_k = forwarded(per_event[:k])
    again = forwarded(replayed)
    assert not (before_k & again), "a record forwarded before the crash was forwarded again"
    assert before_k + again == forwarded(per_event)


def fast_step(r: PartitionRouter, ev) -> list[Decision]:
    """The data path's per-record calls: ``suppresses`` then ``decide`` for a data record."""
    if isinstance(ev, CutoverPlan) or ev.heartbeat or ev.error is not None:
        return step(r, ev)
    if r.suppresses(ev.version, ev.event_time, ev.written_at):
        return [Decision(Outcome.SUPPRESS, ev)]
    return [r.decide(ev)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_data_path_decides_exactly_as_observe(sc: dict) -> None:
    slow, fast = new_router(sc), new_router(sc)
    for ev in events_of(sc):
        a = [(d.outcome, d.record.ref, d.reason) for d in step(slow, ev)]
        b = [(d.outcome, d.record.ref, d.reason) for d in fast_step(fast, ev)]
        assert a == b, ev
        assert fast.snapshot() == slow.snapshot()
        assert fast.counters == slow.counters
        assert [h.ref for h in fast.held] == [h.ref for h in slow.held]
