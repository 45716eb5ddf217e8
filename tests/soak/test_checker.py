"""The soak's checker can fail: loss, duplicates, a wrong version, records out of order at a
boundary and a pinned boundary are each seen (a checker that always passes proves nothing)."""

from __future__ import annotations

from cutover.plan import CutoverPlan
from tests.soak.checker import OutputLog, OutRecord, verify
from tests.soak.plans import first_plan, next_switch
from tests.soak.workload import Event

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
