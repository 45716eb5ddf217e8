from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cutover import headers as h
from cutover.headers import HeaderError, RecordKind, TaggedRecord, parse_headers


def test_round_trip_data_record() -> None:
    rec = TaggedRecord(version="green-2.1", event_time=1_700_000_000_123,
                       watermark=1_699_999_990_000, batch=7)
    parsed = TaggedRecord.from_headers([("other", b"x"), *rec.to_headers()])
    assert parsed == rec
    assert parsed.kind is RecordKind.DATA


def test_heartbeat_needs_no_event_time() -> None:
    parsed = parse_headers(h.heartbeat_headers("blue", 123, 4))
    assert parsed.kind is RecordKind.HEARTBEAT
    assert (parsed.event_time, parsed.watermark, parsed.batch) == (None, 123, 4)


@pytest.mark.parametrize(
    ("headers", "header", "problem"),
    [
        (None, h.VERSION, "is missing"),
        ([(h.EVENT_TIME, b"1")], h.VERSION, "is missing"),
        ([(h.VERSION, b"blue")], h.EVENT_TIME, "is missing on a data record"),
        ([(h.VERSION, b"bl ue"), (h.EVENT_TIME, b"1")], h.VERSION, "is not a version id"),
        ([(h.VERSION, b"x" * 65), (h.EVENT_TIME, b"1")], h.VERSION, "is not a version id"),
        ([(h.VERSION, None), (h.EVENT_TIME, b"1")], h.VERSION, "has no value"),
        ([(h.VERSION, b"\xff"), (h.EVENT_TIME, b"1")], h.VERSION, "is not ASCII"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"1.5")], h.EVENT_TIME, "is not an integer"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b" 1")], h.EVENT_TIME, "is not an integer"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"1_0")], h.EVENT_TIME, "is not an integer"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"")], h.EVENT_TIME, "is not an integer"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"1"), (h.WATERMARK, b"x")], h.WATERMARK,
         "is not an integer"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"1"), (h.BATCH, b"-1")], h.BATCH, "is negative"),
        ([(h.VERSION, b"b"), (h.EVENT_TIME, b"1"), (h.KIND, b"beat")], h.KIND,
         "neither 'data' nor 'heartbeat'"),
        ([(h.VERSION, b"b"), (h.VERSION, b"c"), (h.EVENT_TIME, b"1")], h.VERSION,
         "appears more than once"),
    ],
)
def test_malformed_headers_name_the_header(headers, header, problem) -> None:
    with pytest.raises(HeaderError) as err:
        parse_headers(headers)
    assert err.value.header == header
    assert problem in err.value.problem
    assert header in str(err.value)


versions = st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)
ints = st.integers(min_value=-(2**62), max_value=2**62)


@given(version=versions, event_time=ints, watermark=st.none() | ints,
       batch=st.none() | st.integers(min_value=0, max_value=2**40))
def test_fast_parser_agrees_with_model(version, event_time, watermark, batch) -> None:
    rec = TaggedRecord(version=version, event_time=event_time, watermark=watermark, batch=batch)
    assert TaggedRecord.from_headers(rec.to_headers()) == rec
    assert parse_headers(rec.to_headers())._asdict() == rec.model_dump()


@given(raw=st.binary(max_size=70))
def test_version_check_agrees_with_model(raw: bytes) -> None:
    try:
        parsed = parse_headers([(h.VERSION, raw), (h.EVENT_TIME, b"1")]).version
    except HeaderError:
        parsed = None
    try:
        modelled = TaggedRecord(version=raw.decode("ascii"), event_time=1).version
    except (ValidationError, UnicodeDecodeError):
        modelled = None
    assert parsed == modelled
