from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.rule.identity import (
    IdentityError,
    fields_identity,
    identity_function,
    key_event_time_identity,
    record_identity,
)


def test_record_identity_separates_key_value_split_and_none() -> None:
    assert record_identity(b"ab", b"c", 1) != record_identity(b"a", b"bc", 1)
    assert record_identity(None, b"c", 1) != record_identity(b"", b"c", 1)
    assert record_identity(b"a", b"c", 1) != record_identity(b"a", b"c", 2)
    assert record_identity(b"a", b"c", -1) == record_identity(b"a", b"c", -1)
    assert len(record_identity(b"a", b"c", 1)) == 16


def test_key_event_time_ignores_value() -> None:
    assert key_event_time_identity(b"k", b"x", 5) == key_event_time_identity(b"k", b"y", 5)
    assert key_event_time_identity(b"k", b"x", 5) != key_event_time_identity(b"k", b"x", 6)


def test_fields_identity() -> None:
    ident = fields_identity(("order_id", "$.window.end"))
    a = ident(b"k1", b'{"order_id": 7, "window": {"end": 100}, "amount": 1}', 0)
    b = ident(b"k2", b'{"amount": 2, "window": {"end": 100, "start": 0}, "order_id": 7}', 99)
    assert a == b
    assert a != ident(None, b'{"order_id": 8, "window": {"end": 100}}', 0)
    with pytest.raises(IdentityError, match=r"'\$.window.end' is missing"):
        ident(None, b'{"order_id": 8, "window": 3}', 0)
    with pytest.raises(IdentityError, match="not JSON"):
        ident(None, b"\xff", 0)
    with pytest.raises(IdentityError, match="no value"):
        ident(None, None, 0)


def test_identity_function_by_name() -> None:
    assert identity_function("record") is record_identity
    assert identity_function("key_event_time") is key_event_time_identity
    with pytest.raises(ValueError, match="unknown dedup identity"):
        identity_function("nope")


@given(st.binary(max_size=20), st.binary(max_size=20), st.binary(max_size=20),
       st.binary(max_size=20), st.integers(-(2**60), 2**60))
def test_record_identity_is_injective_on_inputs(k1, v1, k2, v2, t) -> None:
    same = (k1, v1) == (k2, v2)
    assert (record_identity(k1, v1, t) == record_identity(k2, v2, t)) == same
