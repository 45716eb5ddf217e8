"""The router's reckoning of a record's size is librdkafka's (router.rule.oversize)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from router.rule.oversize import dead_letter_of, is_too_large, producer_limit, wire_size

LIMIT = 4000
_producer = Producer({"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": LIMIT,
                      "batch.size": LIMIT, "log_level": 0})

names = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=40)
headers = st.lists(st.tuples(names, st.one_of(st.none(), st.binary(max_size=600))),
                   max_size=6)


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=2500)),
       value=st.one_of(st.none(), st.binary(max_size=3000)), hdrs=headers)
def test_wire_size_says_exactly_which_records_librdkafka_refuses(
        key: bytes | None, value: bytes | None, hdrs: list[tuple[str, bytes | None]]) -> None:
    try:
        _producer.produce("t", value, key, headers=hdrs)
        refused = False
    except KafkaException as exc:
        assert is_too_large(exc), exc
        refused = True
    _producer.purge()
    assert refused == (wire_size(key, value, hdrs) > LIMIT)


def test_the_limit_leaves_room_for_the_batch_header() -> None:
    assert producer_limit([20_000, 1_048_588]) == 19_900
    assert producer_limit([]) == 1_000_000
    assert producer_limit([500]) == 1000  # librdkafka's least


def test_a_dead_letter_of_an_oversize_record_fits() -> None:
    hdrs = [("bg.version", b"blue"), ("bg.src", b"raw:0:7")]
    topic, p, key, out = dead_letter_of("dlq", 0, b"k", b"x" * 50_000, hdrs, LIMIT)
    assert (topic, p, key) == ("dlq", 0, b"k")
    assert wire_size(key, None, out) <= LIMIT
    reason = dict(out)["bg.error"].decode()
    assert f"{wire_size(b'k', b'x' * 50_000, hdrs)} bytes" in reason and str(LIMIT) in reason
    _, _, key, _ = dead_letter_of("dlq", 0, b"k" * 5000, b"x", hdrs, LIMIT)
    assert key is None, "a key too large for the dead-letter topic is left out too"


@pytest.mark.parametrize("n, size", [(0, 1), (63, 1), (64, 2), (8191, 2), (8192, 3)])
def test_header_lengths_count_as_zigzag_varints(n: int, size: int) -> None:
    assert wire_size(None, None, [("", b"x" * n)]) == 36 + n + 1 + size


@given(key=st.one_of(st.none(), st.binary(max_size=300)), hdrs=headers,
       delta=st.integers(-2, 2))
@settings(max_examples=200, deadline=None)
def test_at_the_limit_to_the_byte(key: bytes | None, hdrs: list[tuple[str, bytes | None]],
                                  delta: int) -> None:
    room = LIMIT - wire_size(key, b"", hdrs) + delta
    if room < 0:
        return
    value = b"v" * room
    try:
        _producer.produce("t", value, key, headers=hdrs)
        refused = False
    except KafkaException:
        refused = True
    _producer.purge()
    assert refused == (delta > 0) == (wire_size(key, value, hdrs) > LIMIT)
