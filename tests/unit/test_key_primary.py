"""The primary of a key (cutover.key_primary, CutoverPlan.primary_for) as properties: a function
of the plan, the key and the event time alone; a wider share only adds keys; records without a
key follow the segment's primary; a share of 1 gives every keyed record to the canary."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cutover.key_bucket import BUCKETS, key_bucket
from cutover.key_primary import Canary, KeyRule, handovers, moves
from cutover.plan import CutoverPlan, parse_plan

VERSIONS = ("blue", "green", "red")
keys = st.binary(max_size=24)
shares = st.integers(1, BUCKETS).map(lambda b: b / BUCKETS)
times = st.integers(-10**6, 10**6)


@st.composite
def canary_plans(draw: st.DrawFn) -> CutoverPlan:
    """Valid plans: whole switches, canaries that start, grow, finish or roll back."""
    primary = draw(st.sampled_from(VERSIONS))
    segments = [{"from_event_time": None, "primary": primary}]
    t, canary, share = None, None, 0
    for _ in range(draw(st.integers(0, 5))):
        t = draw(st.integers(-10**6, 10**6)) if t is None else t + draw(st.integers(1, 10**5))
        if canary is None:
            if draw(st.booleans()):  # a whole switch
                primary = draw(st.sampled_from([v for v in VERSIONS if v != primary]))
            else:                    # a canary starts
                canary = draw(st.sampled_from([v for v in VERSIONS if v != primary]))
                share = draw(st.integers(1, BUCKETS))
        else:
            step = draw(st.sampled_from(["grow", "finish", "rollback"]))
            if step == "grow":
                if share == BUCKETS:
                    continue  # every key already: nothing to grow
                share = draw(st.integers(share + 1, BUCKETS))
            elif step == "finish":
                primary, canary = canary, None
            else:
                canary = None
        seg: dict = {"from_event_time": t, "primary": primary}
        if canary is not None:
            seg["canary"] = {"version": canary, "share": share / BUCKETS}
        segments.append(seg)
    return CutoverPlan.model_validate({"route": "r", "epoch": 1, "segments": segments})


def reference_primary(plan: dict, key: bytes | None, t: int) -> str:
    """The rule as the contract states it, on the plan's JSON."""
    seg = [s for s in plan["segments"]
           if s["from_event_time"] is None or s["from_event_time"] <= t][-1]
    canary = seg.get("canary")
    if canary is not None and key is not None and \
            key_bucket(key) < round(canary["share"] * BUCKETS):
        return str(canary["version"])
    return str(seg["primary"])


@given(canary_plans(), st.none() | keys, times)
def test_a_keys_primary_is_the_contracts_rule_on_the_plan_alone(
        plan: CutoverPlan, key: bytes | None, t: int) -> None:
    wire = plan.to_json()
    again = parse_plan(wire)  # another reader of the same control record
    assert plan.primary_for(key, t) == again.primary_for(key, t) == \
        reference_primary(again.model_dump(mode="json"), key, t)


@given(canary_plans(), keys, times)
def test_a_key_has_the_primary_of_its_bytes_not_of_the_object(
        plan: CutoverPlan, key: bytes, t: int) -> None:
    assert plan.primary_for(key, t) == plan.primary_for(bytes(bytearray(key)), t)


@given(canary_plans(), times)
def test_records_without_a_key_follow_the_segments_primary(plan: CutoverPlan, t: int) -> None:
    assert plan.primary_for(None, t) == plan.primary_at(t)


@given(st.lists(keys, max_size=50), shares, shares)
def test_a_wider_share_only_adds_keys(sample: list[bytes], a: float, b: float) -> None:
    narrow, wide = sorted((a, b))
    rule_narrow = KeyRule.of("blue", Canary(version="green", share=narrow))
    rule_wide = KeyRule.of("blue", Canary(version="green", share=wide))
    canary_narrow = {k for k in sample if rule_narrow.owner(key_bucket(k)) == "green"}
    canary_wide = {k for k in sample if rule_wide.owner(key_bucket(k)) == "green"}
    assert canary_narrow <= canary_wide


@given(st.lists(keys, min_size=1, max_size=50))
def test_a_share_of_one_gives_every_keyed_record_to_the_canary(sample: list[bytes]) -> None:
    rule = KeyRule.of("blue", Canary(version="green", share=1))
    assert {rule.owner(key_bucket(k)) for k in sample} == {"green"}
    assert rule.owner(None) == "blue"


rules = st.builds(
    lambda p, c, n: KeyRule(p) if c is None or c == p else KeyRule(p, c, n),
    st.sampled_from(VERSIONS), st.none() | st.sampled_from(VERSIONS), st.integers(1, BUCKETS))


@given(rules, rules)
def test_handovers_are_every_change_of_primary_over_all_buckets(a: KeyRule, b: KeyRule) -> None:
    brute = {(a.owner(x), b.owner(x)) for x in [*range(BUCKETS), None]
             if a.owner(x) != b.owner(x)}
    assert set(handovers(a, b)) == brute
    assert len(handovers(a, b)) == len(brute)


@given(st.lists(rules, min_size=2, max_size=5), st.data())
def test_a_bucket_moves_when_its_primary_differs_anywhere_along_the_segments(
        chain: list[KeyRule], data: st.DataObject) -> None:
    first = data.draw(st.integers(0, len(chain) - 2))
    last = data.draw(st.integers(first + 1, len(chain) - 1))
    bucket = data.draw(st.none() | st.integers(0, BUCKETS - 1))
    owners = {chain[i].owner(bucket) for i in range(first, last + 1)}
    assert moves(chain, first, last, bucket) == (len(owners) > 1)
