from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cutover.plan import PlanBook, PlanRejected, parse_plan, sign_plan


def plan(epoch: int = 1, *segments: tuple[int | None, str], route: str = "orders", **extra):
    segs = segments or ((None, "blue"),)
    body = {"route": route, "epoch": epoch,
            "segments": [{"from_event_time": t, "primary": v} for t, v in segs], **extra}
    return json.dumps(body).encode()


def test_primary_is_last_segment_at_or_before_t() -> None:
    p = parse_plan(plan(3, (None, "blue"), (100, "green"), (200, "blue2")))
    assert [p.primary_at(t) for t in (-5, 99, 100, 199, 200, 10**12)] == [
        "blue", "blue", "green", "green", "blue2", "blue2"]
    assert p.transition == ("green", "blue2", 200)
    assert parse_plan(plan()).transition is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a plan is a JSON object"),
        (b"x" * 70_000, "over the"),
        (plan(1, (5, "blue")), "first segment must have from_event_time null"),
        (plan(1, (None, "blue"), (None, "green")), "only the first may"),
        (plan(1, (None, "blue"), (100, "green"), (100, "blue")), "must strictly increase"),
        (plan(1, (None, "blue"), (100, "green"), (50, "blue")), "must strictly increase"),
        (plan(1, (None, "blue"), (100, "blue")), "repeats primary"),
        (plan(1, (None, "bl ue")), "segments[0].primary"),
        (plan(-1), "epoch"),
        (plan(1, surprise=1), "unknown key 'surprise'"),
        (json.dumps({"route": "orders", "epoch": 1, "segments": []}).encode(), "segments"),
        (json.dumps({"route": "orders", "epoch": "two", "segments": [
            {"from_event_time": None, "primary": "b"}]}).encode(), "epoch"),
        (plan(1, deadline="2026-01-01T00:00:00"), "time zone"),
    ],
)
def test_invalid_plans_are_rejected_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(PlanRejected) as err:
        parse_plan(raw)
    assert reason in err.value.reason


def test_route_key_must_match() -> None:
    with pytest.raises(PlanRejected, match="published under key 'billing'"):
        parse_plan(plan(), route="billing")


def test_rejection_carries_epoch_when_readable() -> None:
    with pytest.raises(PlanRejected) as err:
        parse_plan(plan(7, (None, "blue"), (10, "blue")))
    assert err.value.epoch == 7


def test_signatures() -> None:
    key = b"s3cret"
    p = parse_plan(plan(2, (None, "blue"), (10, "green")))
    signed = sign_plan(p, key)
    assert parse_plan(signed.to_json(), key=key) == signed
    with pytest.raises(PlanRejected, match="unsigned plan"):
        parse_plan(p.to_json(), key=key)
    tampered = signed.model_copy(update={"epoch": 3})
    with pytest.raises(PlanRejected, match="bad plan signature"):
        parse_plan(tampered.to_json(), key=key)
    with pytest.raises(PlanRejected, match="bad plan signature"):
        parse_plan(sign_plan(p, b"other").to_json(), key=key)


def test_plan_book_keeps_last_good_plan() -> None:
    book = PlanBook()
    assert book.offer("orders", plan(2))[0] == "accepted"
    assert book.offer("orders", plan(2, (None, "green")))[0] == "stale"
    assert book.offer("orders", plan(1, (None, "green")))[0] == "stale"
    outcome, rejected = book.offer("orders", b"garbage")
    assert outcome == "rejected" and isinstance(rejected, PlanRejected)
    assert book.offer("orders", None)[0] == "rejected"
    assert book.offer(None, plan(9))[0] == "rejected"
    assert book.plans["orders"].epoch == 2
    assert book.plans["orders"].segments[0].primary == "blue"
    assert book.offer("orders", plan(3, (None, "green")))[0] == "accepted"
    assert book.plans["orders"].epoch == 3


def test_plan_book_restore_never_goes_back() -> None:
    book = PlanBook()
    book.offer("orders", plan(5))
    book.restore(parse_plan(plan(4, (None, "green"))))
    assert book.plans["orders"].epoch == 5
    book.restore(parse_plan(plan(6, (None, "green"))))
    assert book.plans["orders"].epoch == 6


offers = st.one_of(
    st.tuples(st.just("valid"), st.integers(0, 20), st.sampled_from(["blue", "green"])),
    st.tuples(st.just("garbage"), st.binary(max_size=30), st.none()),
    st.tuples(st.just("invalid"), st.integers(0, 20), st.none()),
)


@given(st.lists(offers, max_size=40))
def test_plan_book_holds_the_first_valid_plan_of_the_highest_epoch(seq) -> None:
    book = PlanBook()
    best = None
    for kind, a, b in seq:
        if kind == "valid":
            raw = plan(a, (None, b))
        elif kind == "garbage":
            raw = a
        else:
            raw = plan(a, (None, "blue"), (5, "blue"))  # repeats a primary: invalid
        outcome, got = book.offer("orders", raw)
        if kind == "valid" and (best is None or a > best[0]):
            best = (a, b)
            assert outcome == "accepted"
        elif kind == "valid":
            assert outcome == "stale"
        else:
            assert outcome == "rejected" and isinstance(got, PlanRejected) and got.reason
        held = book.plans.get("orders")
        assert (held is None) == (best is None)
        if held is not None:
            assert (held.epoch, held.segments[0].primary) == best
