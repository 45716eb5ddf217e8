"""The tagged-record envelope: the ``bg.*`` headers the tagger writes and the router reads.

Parsing is on the router's per-record path, so :func:`parse_headers` checks by hand and
returns a plain :class:`Envelope`; :class:`TaggedRecord` validation gives the same answers (a
property test holds the two together).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

VERSION = "bg.version"
EVENT_TIME = "bg.event_time"
WATERMARK = "bg.watermark"
BATCH = "bg.batch"
KIND = "bg.kind"
SRC = "bg.src"      # added by the router to every forwarded record: topic:partition:offset
ERROR = "bg.error"  # added by the router to every dead-lettered record: the reason

VERSION_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
_VERSION_RE = re.compile(VERSION_PATTERN)

VersionId = Annotated[str, Field(pattern=VERSION_PATTERN)]

Headers = list[tuple[str, bytes | None]]


class RecordKind(StrEnum):
    DATA = "data"
    HEARTBEAT = "heartbeat"


class HeaderError(ValueError):
    """A missing or malformed ``bg.*`` header; the message names the header and the problem."""

    def __init__(self, header: str, problem: str) -> None:
        super().__init__(f"header {header}: {problem}")
        self.header = header
        self.problem = problem


class TaggedRecord(BaseModel):
    """What the ``bg.*`` headers of one raw record say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: VersionId
    kind: RecordKind = RecordKind.DATA
    event_time: int | None = None
    watermark: int | None = None
    batch: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _data_needs_event_time(self) -> TaggedRecord:
        if self.kind is RecordKind.DATA and self.event_time is None:
            raise ValueError(f"{EVENT_TIME} is required on a data record")
        return self

    @classmethod
    def from_headers(cls, headers: Headers | None) -> TaggedRecord:
        return cls.model_validate(parse_headers(headers)._asdict())

    def to_headers(self) -> Headers:
        out: Headers = [(VERSION, self.version.encode())]
        if self.kind is RecordKind.DATA:
            out.append((EVENT_TIME, str(self.event_time).encode()))
        else:
            out.append((KIND, b"heartbeat"))
        if self.watermark is not None:
            out.append((WATERMARK, str(self.watermark).encode()))
        if self.batch is not None:
            out.append((BATCH, str(self.batch).encode()))
        return out


def _int(header: str, raw: bytes | None) -> int:
    # int() alone would accept b" 1", b"1_0" and b"+1"; the contract says a plain integer.
    if raw and (raw.isdigit() or (raw[:1] == b"-" and raw[1:].isdigit())):
        return int(raw)
    if raw is None:
        raise HeaderError(header, "has no value")
    text = raw.decode("ascii", "replace")
    raise HeaderError(header, f"{text[:40]!r} is not an integer (epoch milliseconds)")


class Envelope(NamedTuple):
    """The parsed headers, on the per-record path (same fields as :class:`TaggedRecord`)."""

    version: str
    kind: RecordKind
    event_time: int | None
    watermark: int | None
    batch: int | None


# The version-text intern table: a version header's raw bytes -> its checked text, filled by
# the first parse of each version (at most 10,000), so a version is checked once. Public
# because the compiled per-record path reads it too: router.native.compiled hands this very
# dict to its C loop, which recognizes a version by looking its bytes up here.
KNOWN_VERSIONS: dict[bytes, str] = {}
_ENVELOPE_HEADERS = frozenset((VERSION, EVENT_TIME, WATERMARK, BATCH, KIND))


def _version(raw: bytes | None) -> str:
    known = KNOWN_VERSIONS.get(raw)  # type: ignore[arg-type]
    if known is not None:
        return known
    if raw is None:
        raise HeaderError(VERSION, "has no value")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise HeaderError(VERSION, "is not ASCII") from None
    if not _VERSION_RE.fullmatch(text):  # match() would let a trailing newline through
        raise HeaderError(VERSION, f"{text[:70]!r} is not a version id "
                          "([A-Za-z0-9._-], 1 to 64 characters)")
    if len(KNOWN_VERSIONS) < 10_000:
        KNOWN_VERSIONS[raw] = text
    return text


def data_envelope(headers: Headers | None) -> tuple[str, int] | None:
    """``(version, event time)`` when ``headers`` end in the tagger's data layout (the job's
    own headers, then exactly ``bg.version``, ``bg.event_time``, ``bg.watermark``,
    ``bg.batch``, well-formed, none of them repeated); otherwise None, and the caller asks
    :func:`parse_headers`, which handles (or names the problem with) every other shape.

    The router's per-record path: the tagger writes every data record this way, and routing
    a data record needs only these two fields (watermarks come from heartbeats)."""
    if not headers or len(headers) < 4:
        return None
    (a, raw_v), (b, raw_t), (c, raw_w), (d, raw_b) = headers[-4:]
    if (a == VERSION and b == EVENT_TIME and c == WATERMARK and d == BATCH
            and raw_t and raw_w and raw_b
            and raw_t.isdigit() and raw_w.isdigit() and raw_b.isdigit()
            and (len(headers) == 4 or not any(h[0] in _ENVELOPE_HEADERS for h in headers[:-4]))):
        version = KNOWN_VERSIONS.get(raw_v)  # type: ignore[arg-type]
        if version is not None:
            return version, int(raw_t)
    return None


def parse_headers(headers: Headers | None) -> Envelope:
    """Read the envelope from a Kafka header list; raise :class:`HeaderError` on any problem.

    The common case (well-formed, no repeated header name) takes one dict build and a few
    lookups; anything unusual goes through :func:`_parse_headers_checked`, which names the
    problem. This is the router's hottest per-record function."""
    if not headers:
        return _parse_headers_checked(headers)
    d = dict(headers)
    if len(d) != len(headers):
        return _parse_headers_checked(headers)
    raw_t, raw_w, raw_b = d.get(EVENT_TIME, b""), d.get(WATERMARK, b""), d.get(BATCH, b"")
    raw_k = d.get(KIND, b"data")
    version = KNOWN_VERSIONS.get(d.get(VERSION))  # type: ignore[arg-type]
    # b"" stands for an absent header; a present one that is empty, null or not digits, an
    # unknown kind or version, or a data record without event time: the checked path.
    if (version is None or raw_t is None or raw_w is None or raw_b is None
            or (raw_t and not raw_t.isdigit()) or (raw_w and not raw_w.isdigit())
            or (raw_b and not raw_b.isdigit())
            or (raw_k != b"data" and raw_k != b"heartbeat")
            or (not raw_t and raw_k == b"data")
            or (EVENT_TIME in d and not raw_t) or (WATERMARK in d and not raw_w)
            or (BATCH in d and not raw_b)):
        return _parse_headers_checked(headers)
    return Envelope(version,
                    RecordKind.HEARTBEAT if raw_k == b"heartbeat" else RecordKind.DATA,
                    int(raw_t) if raw_t else None, int(raw_w) if raw_w else None,
                    int(raw_b) if raw_b else None)


def _parse_headers_checked(headers: Headers | None) -> Envelope:
    version = event_time = watermark = batch = None
    kind = RecordKind.DATA
    seen: set[str] = set()
    for name, raw in headers or ():
        if name not in _ENVELOPE_HEADERS:
            continue
        if name in seen:
            raise HeaderError(name, "appears more than once")
        seen.add(name)
        if name == EVENT_TIME:
            event_time = _int(EVENT_TIME, raw)
        elif name == VERSION:
            version = _version(raw)
        elif name == WATERMARK:
            watermark = _int(WATERMARK, raw)
        elif name == BATCH:
            batch = _int(BATCH, raw)
            if batch < 0:
                raise HeaderError(BATCH, "is negative")
        elif raw == b"heartbeat":
            kind = RecordKind.HEARTBEAT
        elif raw != b"data":
            raise HeaderError(KIND, f"{raw!r} is neither 'data' nor 'heartbeat'")
    if version is None:
        raise HeaderError(VERSION, "is missing")
    if event_time is None and kind is RecordKind.DATA:
        raise HeaderError(EVENT_TIME, "is missing on a data record")
    return Envelope(version, kind, event_time, watermark, batch)


def heartbeat_headers(version: str, watermark: int | None, batch: int) -> Headers:
    return TaggedRecord(
        version=version, kind=RecordKind.HEARTBEAT, watermark=watermark, batch=batch
    ).to_headers()
