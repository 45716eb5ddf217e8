"""The per-key canary in a plan (cutover.plan, cutover.key_primary): its form on the wire,
what validation refuses and why, and the transition it makes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cutover.plan import PlanRejected, parse_plan, sign_plan

T1, T2, T3 = 1_000, 2_000, 3_000


def seg(t: int | None, primary: str, canary: str | None = None,
        share: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"from_event_time": t, "primary": primary}
    if canary is not None:
        out["canary"] = {"version": canary, "share": share}
    return out


def body(*segments: dict[str, Any]) -> dict[str, Any]:
    return {"route": "orders", "epoch": 4, "segments": list(segments)}


def test_a_plan_without_a_canary_is_written_exactly_as_before() -> None:
    raw = (b'{"route":"orders","epoch":4,"segments":[{"from_event_time":null,"primary":"blue"},'
           b'{"from_event_time":1000,"primary":"green"}],"deadline":null,"issued_at":null,'
           b'"issued_by":null,"signature":null}')
    plan = parse_plan(raw)
    assert plan.to_json() == raw
    assert plan.signing_payload() == (
        b'{"deadline":null,"epoch":4,"issued_at":null,"issued_by":null,"route":"orders",'
        b'"segments":[{"from_event_time":null,"primary":"blue"},'
        b'{"from_event_time":1000,"primary":"green"}]}')


def test_a_canary_is_written_on_its_segment_and_read_back_the_same() -> None:
    plan = parse_plan(body(seg(None, "blue"), seg(T1, "blue", "green", 0.05)))
    segment = json.loads(plan.to_json())["segments"][1]
    assert segment == {"from_event_time": T1, "primary": "blue",
                       "canary": {"version": "green", "share": 0.05}}
    assert parse_plan(plan.to_json()) == plan


def test_the_signature_covers_the_canary() -> None:
    key = b"k" * 32
    signed = sign_plan(parse_plan(body(seg(None, "blue"), seg(T1, "blue", "green", 0.05))), key)
    parse_plan(signed.to_json(), key=key)
    wider = json.loads(signed.to_json())
    wider["segments"][1]["canary"]["share"] = 0.5
    with pytest.raises(PlanRejected, match="bad plan signature"):
        parse_plan(json.dumps(wider), key=key)


@pytest.mark.parametrize(("share", "buckets"), [
    (0.0001, 1), (0.05, 500), (0.07, 700), (0.3, 3000), (0.9999, 9999), (1, 10_000)])
def test_a_share_is_a_whole_number_of_the_10000_buckets(share: float, buckets: int) -> None:
    plan = parse_plan(body(seg(None, "blue", "green", share)))
    assert plan.segments[0].canary is not None
    assert plan.segments[0].canary.buckets == buckets


@pytest.mark.parametrize(("segments", "reason"), [
    ((seg(None, "blue", "green", 0),), "share 0 is outside (0, 1]"),
    ((seg(None, "blue", "green", -0.1),), "share -0.1 is outside (0, 1]"),
    ((seg(None, "blue", "green", 1.01),), "share 1.01 is outside (0, 1]"),
    ((seg(None, "blue", "green", 0.00005),), "not a whole number of basis points"),
    ((seg(None, "blue", "green", 0.12346),), "round it, e.g. to 0.1235"),
    ((seg(None, "blue", "green", True),), "share is a number in (0, 1]"),
    ((seg(None, "blue", "green", "0.05"),), "share is a number in (0, 1]"),
    ((seg(None, "blue", "green", float("nan")),), "finite number"),
    ((seg(None, "blue", "blue", 0.05),), "canary version 'blue' is the segment's primary"),
    ((seg(None, "blue", "gr een", 0.05),), "segments[0].canary.version"),
    (({"from_event_time": None, "primary": "blue",
       "canary": {"version": "green", "share": 0.1, "keys": "all"}},),
     "unknown key 'segments[0].canary.keys'"),
    (({"from_event_time": None, "primary": "blue", "canary": {"share": 0.1}},),
     "missing required key 'segments[0].canary.version'"),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.25), seg(T2, "blue", "green", 0.05)),
     "segment 2 gives canary 'green' a share of 0.05, less than segment 1's 0.25: shares only "
     "grow"),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.25), seg(T2, "blue", "green", 0.25)),
     "segment 2 repeats segment 1 (primary 'blue', canary 'green' at 0.25); merge them"),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "blue", "red", 0.05)),
     "changes the canary from 'green' to 'red'"),
    ((seg(None, "blue"), seg(T1, "red", "green", 0.05)),
     "segment 1 makes 'red' primary and starts canary 'green' at once"),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "green", "blue", 0.5)),
     "segment 2 makes 'green' primary and keeps canary 'blue' at once"),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "red")),
     "segment 2 gives every key to 'red', which is neither segment 1's primary 'blue' (a "
     "rollback) nor its canary 'green' (the full switch)"),
])
def test_invalid_canaries_are_rejected_with_a_reason(segments: tuple[dict[str, Any], ...],
                                                     reason: str) -> None:
    with pytest.raises(PlanRejected) as err:
        parse_plan(body(*segments))
    assert reason in err.value.reason
    assert err.value.epoch == 4


@pytest.mark.parametrize("segments", [
    # a rollout: 5%, 25%, then every key
    (seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "blue", "green", 0.25),
     seg(T3, "green")),
    # a rollback, then a fresh canary from a smaller share
    (seg(None, "blue"), seg(T1, "blue", "green", 0.25), seg(T2, "blue"),
     seg(T3, "blue", "green", 0.01)),
    # every keyed record to the canary; records without a key stay on blue
    (seg(None, "blue"), seg(T1, "blue", "green", 1)),
    # a canary from the start of the timeline
    (seg(None, "blue", "green", 0.5),),
])
def test_rollouts_and_rollbacks_are_valid(segments: tuple[dict[str, Any], ...]) -> None:
    parse_plan(body(*segments))


@pytest.mark.parametrize(("segments", "transition"), [
    ((seg(None, "blue"), seg(T1, "green")), ("blue", "green", T1)),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05)), ("blue", "green", T1)),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "blue", "green", 0.5)),
     ("blue", "green", T2)),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "green")),
     ("blue", "green", T2)),
    ((seg(None, "blue"), seg(T1, "blue", "green", 0.05), seg(T2, "blue")),
     ("green", "blue", T2)),
])
def test_the_transition_names_the_version_giving_keys_away_and_the_one_taking_them(
        segments: tuple[dict[str, Any], ...], transition: tuple[str, str, int]) -> None:
    assert parse_plan(body(*segments)).transition == transition


def test_a_canary_version_is_one_of_the_plans_versions() -> None:
    plan = parse_plan(body(seg(None, "blue"), seg(T1, "blue", "green", 0.05)))
    assert plan.versions() == {"blue", "green"}
    assert plan.has_canary
    assert not parse_plan(body(seg(None, "blue"))).has_canary
