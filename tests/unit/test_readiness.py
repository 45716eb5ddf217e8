from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cutover.plan import CutoverPlan
from cutover.readiness import PartitionProgress, readiness
from cutover.status import TransitionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def plan(deadline: datetime | None = None, epoch: int = 2) -> CutoverPlan:
    return CutoverPlan(route="r", epoch=epoch, deadline=deadline, segments=[
        {"from_event_time": None, "primary": "blue"},
        {"from_event_time": 100, "primary": "green"}])


def prog(blue: int | None, green: int | None, *, epoch: int = 2, boundary: int | None = 100,
         held: int = 0) -> PartitionProgress:
    wms = {k: v for k, v in (("blue", blue), ("green", green)) if v is not None}
    return PartitionProgress(epoch=epoch, boundary=boundary, watermarks=wms, held=held)


def test_steady_without_a_transition() -> None:
    single = CutoverPlan(route="r", epoch=1, segments=[{"from_event_time": None,
                                                         "primary": "blue"}])
    assert readiness(single, {}, 2, NOW).state is TransitionState.STEADY
    assert readiness(None, {}, 2, NOW).state is TransitionState.STEADY


def test_clear_when_both_versions_passed_on_every_partition() -> None:
    t = readiness(plan(), {0: prog(100, 130), 1: prog(120, 100)}, 2, NOW)
    assert t.state is TransitionState.CLEAR_TO_TEARDOWN
    assert (t.from_, t.to, t.boundary, t.holdups) == ("blue", "green", 100, ())


def test_pending_names_partition_and_version() -> None:
    t = readiness(plan(), {0: prog(100, 130), 1: prog(99, None)}, 2, NOW)
    assert t.state is TransitionState.PENDING
    assert [(h.partition, h.version) for h in t.holdups] == [(1, "green"), (1, "blue")]
    assert "old version 'blue' at watermark 99, needs 100" in t.describe_holdups()


def test_missing_or_stale_partition_and_held_records_hold_it_back() -> None:
    t = readiness(plan(), {0: prog(100, 130, held=3), 1: prog(200, 200, epoch=1)}, 3, NOW)
    whys = [(h.partition, h.why) for h in t.holdups]
    assert (0, "router still holds 3 records") in whys
    assert any(p == 1 and "epoch 2" in w for p, w in whys)
    assert any(p == 2 and "epoch 2" in w for p, w in whys)


def test_pinned_boundary_of_a_partition_is_the_one_checked() -> None:
    t = readiness(plan(), {0: prog(150, 160, boundary=151)}, 1, NOW)
    assert t.state is TransitionState.PENDING
    assert t.holdups[0].needed == 151


def test_stalled_after_the_deadline_only_if_not_clear() -> None:
    late = plan(deadline=NOW - timedelta(seconds=1))
    assert readiness(late, {0: prog(99, 130)}, 1, NOW).state is TransitionState.STALLED
    assert readiness(plan(deadline=NOW + timedelta(seconds=1)), {0: prog(99, 130)}, 1,
                     NOW).state is TransitionState.PENDING
    assert readiness(late, {0: prog(100, 130)}, 1, NOW).state is \
        TransitionState.CLEAR_TO_TEARDOWN


# -- with a canary in force, the old version is still primary for most keys -------------------


def canary_plan(share: float | None, *, then: str | None = None) -> CutoverPlan:
    """blue, then green's canary at ``share`` from 100; ``then`` ends it at 200 (green: the
    full switch, blue: the rollback)."""
    segments: list[dict[str, object]] = [
        {"from_event_time": None, "primary": "blue"},
        {"from_event_time": 100, "primary": "blue",
         "canary": {"version": "green", "share": share}}]
    if then is not None:
        segments.append({"from_event_time": 200, "primary": then})
    return CutoverPlan(route="r", epoch=2, segments=segments)


def test_a_canary_handed_over_is_not_clear_to_tear_the_old_version_down() -> None:
    t = readiness(canary_plan(0.05), {0: prog(100, 130), 1: prog(120, 100)}, 2, NOW)
    assert t.state is TransitionState.HANDED_OVER
    assert (t.from_, t.to, t.boundary, t.share) == ("blue", "green", 100, 0.05)
    assert t.state.clear and t.state is not TransitionState.CLEAR_TO_TEARDOWN


def test_a_canary_of_every_key_still_keeps_the_keyless_records_on_the_old_version() -> None:
    t = readiness(canary_plan(1.0), {0: prog(100, 100)}, 1, NOW)
    assert t.state is TransitionState.HANDED_OVER
    assert t.share == 1.0


def test_a_canary_not_handed_over_yet_is_pending_with_its_share() -> None:
    t = readiness(canary_plan(0.25), {0: prog(99, 130)}, 1, NOW)
    assert (t.state, t.share) == (TransitionState.PENDING, 0.25)


def test_clear_to_tear_down_once_a_segment_without_the_canary_ends_it() -> None:
    full = readiness(canary_plan(0.25, then="green"), {0: prog(200, 200, boundary=200)}, 1, NOW)
    assert (full.state, full.from_, full.to, full.share) == (
        TransitionState.CLEAR_TO_TEARDOWN, "blue", "green", None)
    back = readiness(canary_plan(0.25, then="blue"), {0: prog(200, 200, boundary=200)}, 1, NOW)
    assert (back.state, back.from_, back.to, back.share) == (
        TransitionState.CLEAR_TO_TEARDOWN, "green", "blue", None)


def test_the_share_is_on_the_wire_only_with_a_canary() -> None:
    with_canary = readiness(canary_plan(0.05), {0: prog(100, 100)}, 1, NOW)
    assert with_canary.model_dump(mode="json", by_alias=True)["share"] == 0.05
    whole = readiness(plan(), {0: prog(100, 100)}, 1, NOW)
    assert "share" not in whole.model_dump(mode="json", by_alias=True)
    assert "share" not in whole.model_dump_json(by_alias=True)
