from __future__ import annotations

from rule_support import SetStore, make_plan

from router.rule.decision import Incoming, Outcome, PartitionRouter, PartitionSnapshot
from router.rule.identity import identity_function


def router(*, ordered: bool = True, identity: str | tuple[str, ...] = "record",
           retention_ms: int = 10**9, max_held: int = 1000) -> PartitionRouter:
    return PartitionRouter(0, identity=identity_function(identity), store=SetStore(),
                           retention_ms=retention_ms, ordered=ordered, max_held=max_held)


def rec(version: str, t: int, wm: int | None = None, key: bytes = b"k", value: bytes | None = None
        ) -> Incoming:
    return Incoming(version, t, wm, key, value if value is not None else f"{version}:{t}".encode())


def beat(version: str, wm: int) -> Incoming:
    return Incoming(version, None, wm, heartbeat=True)


def outcomes(decisions) -> list[tuple[str, str, int | None]]:
    return [(d.outcome.value, d.record.version, d.record.event_time) for d in decisions]


BLUE = make_plan(1, (None, "blue"))
SWITCH_100 = make_plan(2, (None, "blue"), (100, "green"))


def test_steady_forwards_primary_and_suppresses_the_other() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert outcomes(r.observe(rec("blue", 5))) == [("forward", "blue", 5)]
    assert outcomes(r.observe(rec("green", 5))) == [("suppress", "green", 5)]
    assert r.counters.forwarded == 1 and r.counters.suppressed == {"green": 1}
    assert r.horizon == 5


def test_no_plan_holds_then_releases_in_arrival_order() -> None:
    r = router()
    assert outcomes(r.observe(rec("blue", 5))) == [("hold", "blue", 5)]
    assert outcomes(r.observe(rec("green", 3))) == [("hold", "green", 3)]
    assert r.horizon is None
    assert outcomes(r.apply_plan(BLUE)) == [("forward", "blue", 5), ("suppress", "green", 3)]
    assert r.held == []


def test_immediate_switch_routes_by_event_time() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    got = []
    for v, t in [("blue", 99), ("green", 99), ("green", 100), ("blue", 100), ("blue", 150)]:
        got += outcomes(r.observe(rec(v, t)))
    assert got == [("forward", "blue", 99), ("suppress", "green", 99), ("forward", "green", 100),
                   ("suppress", "blue", 100), ("suppress", "blue", 150)]


def test_ordered_handover_holds_new_until_old_passes_boundary() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    assert outcomes(r.observe(rec("green", 120, wm=110))) == [("hold", "green", 120)]
    assert outcomes(r.observe(rec("green", 101, wm=110))) == [("hold", "green", 101)]
    assert outcomes(r.observe(rec("blue", 98, wm=90))) == [("forward", "blue", 98)]
    # a record of blue's batch whose watermark passes the boundary releases nothing: that
    # batch is the one that emits blue's last windows below the boundary
    assert outcomes(r.observe(rec("blue", 99, wm=100))) == [("forward", "blue", 99)]
    assert outcomes(r.observe(rec("blue", 97, wm=100))) == [("forward", "blue", 97)]
    # the batch's heartbeat does: nothing more below the boundary can come from blue
    assert outcomes(r.observe(beat("blue", 100))) == [
        ("forward", "green", 120), ("forward", "green", 101)]
    assert outcomes(r.observe(rec("green", 130))) == [("forward", "green", 130)]


def test_heartbeat_releases_held_records_and_is_never_decided() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    r.observe(rec("green", 105))
    assert r.observe(beat("blue", 99)) == []
    assert outcomes(r.observe(beat("blue", 100))) == [("forward", "green", 105)]
    assert r.watermarks == {"blue": 100}
    assert r.counters.forwarded == 1


def test_duplicates_are_removed_by_identity() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert outcomes(r.observe(rec("blue", 5))) == [("forward", "blue", 5)]
    assert outcomes(r.observe(rec("blue", 5))) == [("duplicate", "blue", 5)]
    assert outcomes(r.observe(rec("blue", 5, key=b"other"))) == [("forward", "blue", 5)]
    assert r.counters.duplicates == 1


def test_key_event_time_identity_removes_a_changed_value() -> None:
    r = router(identity="key_event_time")
    r.apply_plan(BLUE)
    r.observe(rec("blue", 5, value=b"a"))
    assert outcomes(r.observe(rec("blue", 5, value=b"b"))) == [("duplicate", "blue", 5)]


def test_late_plan_is_pinned_above_the_horizon() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    for t in (100, 150, 120):
        r.observe(rec("blue", t))
    assert r.horizon == 150
    r.apply_plan(SWITCH_100)
    assert r.pinned == (151,)
    assert r.timeline is not None and r.timeline.bounds == (151,)
    # a record below the pin is decided by the rule that was in force: blue
    assert outcomes(r.observe(rec("green", 130))) == [("suppress", "green", 130)]
    assert outcomes(r.observe(rec("blue", 140))) == [("forward", "blue", 140)]
    assert outcomes(r.observe(rec("green", 151))) == [("forward", "green", 151)]


def test_suppressed_records_also_advance_the_horizon() -> None:
    # green ran ahead while blue was primary: its suppressed records locked the rule to t=300
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.observe(rec("green", 300))
    r.apply_plan(SWITCH_100)
    assert r.pinned == (301,)
    assert outcomes(r.observe(rec("blue", 200))) == [("forward", "blue", 200)]


def test_plan_ahead_of_horizon_is_not_pinned() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.observe(rec("blue", 50))
    r.apply_plan(SWITCH_100)
    assert r.pinned == () and r.timeline.bounds == (100,)


def test_retroactive_rollback_keeps_decided_history() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    r.observe(rec("green", 180))
    # epoch 3 says blue everywhere; green already decided up to 180, so that stays green
    r.apply_plan(make_plan(3, (None, "blue")))
    assert r.timeline.bounds == (100, 181)
    assert r.timeline.primaries == ("blue", "green", "blue")
    assert outcomes(r.observe(rec("green", 150))) == [("forward", "green", 150)]
    assert outcomes(r.observe(rec("blue", 150))) == [("suppress", "blue", 150)]
    assert outcomes(r.observe(rec("blue", 181))) == [("forward", "blue", 181)]


def test_rollback_by_later_plan_ahead_of_horizon() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    r.observe(rec("green", 110))
    r.apply_plan(make_plan(3, (None, "blue"), (100, "green"), (200, "blue")))
    assert r.pinned == ()
    assert outcomes(r.observe(rec("blue", 205))) == [("forward", "blue", 205)]
    assert outcomes(r.observe(rec("green", 205))) == [("suppress", "green", 205)]


def test_stale_epochs_are_ignored() -> None:
    r = router(ordered=False)
    r.apply_plan(SWITCH_100)
    r.apply_plan(make_plan(2, (None, "green")))
    r.apply_plan(make_plan(1, (None, "green")))
    assert r.epoch == 2 and r.timeline.primaries == ("blue", "green")


def test_dead_letters() -> None:
    r = router(retention_ms=100, identity=("order_id",))
    r.apply_plan(BLUE)
    bad = Incoming("?", None, error="header bg.version: is missing")
    assert [(d.outcome, d.reason) for d in r.observe(bad)] == [
        (Outcome.DEAD_LETTER, "header bg.version: is missing")]
    (d,) = r.observe(rec("blue", 500, value=b'{"x": 1}'))
    assert d.outcome is Outcome.DEAD_LETTER and "'order_id' is missing" in d.reason
    (d,) = r.observe(rec("blue", 500, value=b"not json"))
    assert d.outcome is Outcome.DEAD_LETTER and "not JSON" in d.reason
    r.observe(rec("blue", 1000, value=b'{"order_id": 1}'))
    (d,) = r.observe(rec("blue", 899, value=b'{"order_id": 2}'))
    assert d.outcome is Outcome.DEAD_LETTER and "older than the dedup retention" in d.reason
    (d,) = r.observe(rec("blue", 900, value=b'{"order_id": 3}'))
    assert d.outcome is Outcome.FORWARD
    assert r.counters.dead_lettered == 4


def test_suppression_comes_before_retention_check() -> None:
    r = router(retention_ms=10)
    r.apply_plan(BLUE)
    r.observe(rec("blue", 1000))
    assert outcomes(r.observe(rec("green", 5))) == [("suppress", "green", 5)]


def test_over_max_held_the_partition_pauses_and_keeps_the_bound() -> None:
    r = router(max_held=2)
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    ds = [r.observe(rec("green", t))[0] for t in (101, 102, 103, 104)]
    assert [d.outcome for d in ds] == ["hold", "hold", "over_bound", "over_bound"]
    assert "max_held" in (ds[2].reason or "")
    assert r.paused and r.counters.pauses == 1 and len(r.held) == 2
    rule = r.hold_rule()
    assert rule.holds("green", 103, None) and not rule.holds("blue", 99, None)
    changes = r.rule_changes
    released = r.observe(beat("blue", 100))
    assert outcomes(released) == [("forward", "green", t) for t in (101, 102)]
    assert not r.paused and r.rule_changes > changes
    # the caller reads the two not kept again: they are decided now
    assert outcomes([r.observe(rec("green", t))[0] for t in (103, 104)]) == [
        ("forward", "green", 103), ("forward", "green", 104)]


def test_snapshot_round_trips_through_json() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.observe(rec("blue", 150, wm=140))
    r.apply_plan(SWITCH_100)
    snap = PartitionSnapshot.model_validate_json(r.snapshot().model_dump_json())
    r2 = router(ordered=False)
    r2.restore(snap)
    assert r2.snapshot() == r.snapshot()
    assert outcomes(r2.observe(rec("green", 151))) == [("forward", "green", 151)]


def test_closed_boundary_survives_restore_without_old_watermark() -> None:
    # blue is torn down after the handover; a restored partition must not wait for it again
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(SWITCH_100)
    r.observe(beat("blue", 100))
    snap = r.snapshot().model_copy(update={"watermarks": {}})
    r2 = router()
    r2.restore(snap)
    assert outcomes(r2.observe(rec("green", 130))) == [("forward", "green", 130)]


def test_boundary_of_reports_this_partitions_pin() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.observe(rec("blue", 200))
    r.apply_plan(SWITCH_100)
    assert r.boundary_of("green") == 201
    assert r.boundary_of("blue") is None
    assert (r.epoch, r.boundary) == (SWITCH_100.epoch, 201)
