from __future__ import annotations

import pytest
from hypothesis import given, settings
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


_NAMES = st.sampled_from(["bg.version", "bg.event_time", "bg.watermark", "bg.batch", "bg.kind",
                          "app"])
_VALUES = st.one_of(st.none(), st.sampled_from([b"", b"blue", b"green", b"data", b"heartbeat",
                                                b"12", b"-5", b"+3", b" 7", b"1_0", b"x"]),
                    st.binary(max_size=6))


_EDGE = st.sampled_from([None, b"", b"-5", b"+3", b" 7", b"x", b"data", b"heartbeat", b"blue",
                         b"0"])


@st.composite
def _near_valid(draw: st.DrawFn) -> list:
    """A well-formed envelope with up to two headers replaced, dropped, added or repeated."""
    base = [("bg.version", draw(st.sampled_from([b"blue", b"green"]))),
            ("bg.event_time", b"1767225600000"), ("bg.watermark", b"1767225599000"),
            ("bg.batch", b"7"), ("bg.kind", draw(st.sampled_from([b"data", b"heartbeat"]))),
            ("app", b"x")]
    base = draw(st.permutations(base))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(base) - 1))
        action = draw(st.sampled_from(["value", "drop", "add", "repeat"]))
        if action == "value":
            base[i] = (base[i][0], draw(_EDGE))
        elif action == "drop":
            del base[i]
            if not base:
                break
        elif action == "add":
            base.insert(i, (draw(_NAMES), draw(_EDGE)))
        else:
            base.insert(i, base[i])
    return base


@settings(max_examples=500)
@given(st.one_of(st.lists(st.tuples(_NAMES, _VALUES), max_size=7), _near_valid()))
def test_fast_path_and_checked_path_agree_on_any_header_list(headers) -> None:
    """parse_headers takes a fast path for the common case; whatever the input, it must give
    the same envelope or the same error as the checked parser."""
    _same_outcome(headers)


def _same_outcome(headers) -> None:
    from cutover.headers import _parse_headers_checked

    def outcome(parse):
        try:
            return parse(headers)
        except HeaderError as exc:
            return ("error", exc.header, str(exc))

    parse_headers([("bg.version", b"blue"), ("bg.event_time", b"1")])  # blue is a known version
    assert outcome(parse_headers) == outcome(_parse_headers_checked), headers


@pytest.mark.parametrize("kind", [b"data", b"heartbeat"])
@pytest.mark.parametrize("name", ["bg.version", "bg.event_time", "bg.watermark", "bg.batch",
                                  "bg.kind"])
@pytest.mark.parametrize("value", [None, b"", b"-5", b"+3", b" 7", b"x", b"data", b"heartbeat",
                                   b"blue", b"0", "drop", "repeat"])
def test_fast_path_agrees_on_every_single_change(kind: bytes, name: str, value) -> None:
    headers = [("bg.version", b"blue"), ("bg.event_time", b"1767225600000"),
               ("bg.watermark", b"1767225599000"), ("bg.batch", b"7"), ("bg.kind", kind)]
    i = next(j for j, (n, _) in enumerate(headers) if n == name)
    if value == "drop":
        del headers[i]
    elif value == "repeat":
        headers.insert(i, headers[i])
    else:
        headers[i] = (name, value)
    _same_outcome(headers)


def _tagger_layout(draw: st.DrawFn) -> list:
    """The tagger's data layout (job headers, then the four envelope headers), with up to two
    changes; or anything else."""
    job = draw(st.lists(st.tuples(st.sampled_from(["app", "trace", "bg.kind", "bg.batch"]),
                                  _VALUES), max_size=2))
    tail = [("bg.version", draw(st.sampled_from([b"blue", b"green", b"n/a", b""]))),
            ("bg.event_time", draw(st.sampled_from([b"1767225600000", b"0", b"-5", b"", b"x"]))),
            ("bg.watermark", draw(st.sampled_from([b"1767225599000", b"+3", b"", None]))),
            ("bg.batch", draw(st.sampled_from([b"7", b" 7", b""])))]
    if draw(st.booleans()):
        tail = draw(st.permutations(tail))
    return job + tail


@settings(max_examples=500)
@given(st.one_of(st.composite(_tagger_layout)(), _near_valid(),
                 st.lists(st.tuples(_NAMES, _VALUES), max_size=7)))
def test_data_envelope_agrees_with_parse_headers(headers) -> None:
    """The router's per-record recognizer answers only when parse_headers would give a data
    envelope with the same version and event time; None sends the record to parse_headers."""
    parse_headers([("bg.version", b"blue"), ("bg.event_time", b"1")])  # blue is a known version
    parse_headers([("bg.version", b"green"), ("bg.event_time", b"1")])
    fast = h.data_envelope(headers)
    if fast is None:
        return
    env = parse_headers(headers)  # raises if the recognizer accepted a bad envelope
    assert env.kind is RecordKind.DATA
    assert fast == (env.version, env.event_time)


def test_data_envelope_recognizes_what_the_tagger_writes() -> None:
    parse_headers([("bg.version", b"blue"), ("bg.event_time", b"1")])
    tagged = TaggedRecord(version="blue", event_time=1767225600000, watermark=1767225599000,
                          batch=3).to_headers()
    assert h.data_envelope(tagged) == ("blue", 1767225600000)
    assert h.data_envelope([("app", b"x"), *tagged]) == ("blue", 1767225600000)
    assert h.data_envelope([("bg.version", b"green"), *tagged]) is None  # repeated: checked
    assert h.data_envelope(TaggedRecord(version="blue", event_time=1, batch=3).to_headers()) \
        is None  # no watermark yet: the general parser handles it
