"""The per-key canary in one partition's rule (router.rule.decision), case by case."""

from __future__ import annotations

from typing import Any

from test_decision import beat, outcomes, rec, router

from cutover.plan import CutoverPlan
from router.rule.decision import PartitionSnapshot

IN, OUT = b"k3", b"k2"   # buckets 573 and 9966: in and out of a 10% canary


def plan(epoch: int, *segments: tuple[int | None, str, str | None, float]) -> CutoverPlan:
    segs: list[dict[str, Any]] = []
    for t, primary, canary, share in segments:
        s: dict[str, Any] = {"from_event_time": t, "primary": primary}
        if canary is not None:
            s["canary"] = {"version": canary, "share": share}
        segs.append(s)
    return CutoverPlan.model_validate({"route": "r", "epoch": epoch, "segments": segs})


BLUE = plan(1, (None, "blue", None, 0))
CANARY_100 = plan(2, (None, "blue", None, 0), (100, "blue", "green", 0.1))
ROLLBACK_200 = plan(3, (None, "blue", None, 0), (100, "blue", "green", 0.1),
                    (200, "blue", None, 0))


def test_a_canary_key_goes_to_the_canary_and_every_other_record_to_the_primary() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.apply_plan(CANARY_100)
    got = []
    for v, t, key in [("green", 150, IN), ("blue", 150, IN), ("blue", 150, OUT),
                      ("green", 150, OUT), ("blue", 150, None), ("green", 150, None),
                      ("green", 99, IN), ("blue", 99, IN)]:
        got += outcomes(r.observe(rec(v, t, key=key)))  # type: ignore[arg-type]
    assert got == [("forward", "green", 150), ("suppress", "blue", 150),
                   ("forward", "blue", 150), ("suppress", "green", 150),
                   ("forward", "blue", 150), ("suppress", "green", 150),
                   ("suppress", "green", 99), ("forward", "blue", 99)]


def test_a_late_canary_is_pinned_above_the_horizon_canary_and_all() -> None:
    r = router(ordered=False)
    r.apply_plan(BLUE)
    r.observe(rec("blue", 150, key=OUT))
    r.apply_plan(CANARY_100)
    assert r.pinned == (151,)
    assert r.timeline is not None and r.timeline.bounds == (151,)
    assert r.timeline.canaries[1] is not None and r.timeline.canaries[1].buckets == 1000
    assert outcomes(r.observe(rec("blue", 120, key=IN))) == [("forward", "blue", 120)]
    assert outcomes(r.observe(rec("green", 151, key=IN))) == [("forward", "green", 151)]


def test_only_keys_that_change_primary_wait_for_the_old_primary() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(CANARY_100)
    assert outcomes(r.observe(rec("green", 120, key=IN))) == [("hold", "green", 120)]
    assert r.hold_rule().holds("green", 120, None, IN)
    # blue keeps the other keys and the records without a key: nothing to wait for
    assert outcomes(r.observe(rec("blue", 120, key=OUT))) == [("forward", "blue", 120)]
    assert outcomes(r.observe(rec("blue", 121, key=None))) == [("forward", "blue", 121)]
    assert not r.hold_rule().holds("blue", 122, None, OUT)
    assert outcomes(r.observe(beat("blue", 100))) == [("forward", "green", 120)]


def test_a_rollback_waits_for_the_canary_version_to_pass_it() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(ROLLBACK_200)
    r.observe(beat("blue", 150))          # blue has passed the canary's boundary
    [held] = r.observe(rec("blue", 210, key=IN))
    assert outcomes([held]) == [("hold", "blue", 210)]
    assert held.reason == "ordered handover: waiting for 'green' to pass 200"
    assert r.observe(beat("blue", 300)) == []
    assert outcomes(r.observe(beat("green", 200))) == [("forward", "blue", 210)]


def test_a_partition_state_with_a_canary_is_stored_and_read_back() -> None:
    r = router()
    r.apply_plan(BLUE)
    r.apply_plan(CANARY_100)
    stored = r.snapshot().model_dump_json()
    assert '"canaries":[null,{"version":"green","share":0.1}]' in stored
    assert PartitionSnapshot.model_validate_json(stored) == r.snapshot()


def test_a_partition_state_without_a_canary_is_stored_as_before() -> None:
    r = router()
    r.apply_plan(BLUE)
    assert r.snapshot().model_dump_json() == (
        '{"partition":0,"epoch":1,"horizon":null,"timeline":{"bounds":[],"primaries":["blue"]},'
        '"pinned":[],"watermarks":{},"closed_through":null}')
