"""Dedup identities: which records count as "the same record" for a route."""

from __future__ import annotations

import json
from collections.abc import Callable
from hashlib import blake2b

IDENTITY_BYTES = 16

IdentityFn = Callable[[bytes | None, bytes | None, int], bytes]


class IdentityError(ValueError):
    """The identity cannot be computed (e.g. a named JSON field is missing)."""


_NONE = b"\xff\xff\xff\xff"


def _part(b: bytes | None) -> bytes:
    # Length-prefixed so that (key=b"ab", value=b"c") and (b"a", b"bc") differ; None != b"".
    if b is None:
        return _NONE
    return len(b).to_bytes(4, "big") + b


def record_identity(key: bytes | None, value: bytes | None, event_time: int) -> bytes:
    """Digest of (key, value, event time): replays of the same output are the same record."""
    # _part inlined into one join: this runs once per forwarded record.
    return blake2b(b"".join((
        _NONE if key is None else len(key).to_bytes(4, "big"), key or b"",
        _NONE if value is None else len(value).to_bytes(4, "big"), value or b"",
        event_time.to_bytes(8, "big", signed=True))), digest_size=IDENTITY_BYTES).digest()


def key_event_time_identity(key: bytes | None, value: bytes | None, event_time: int) -> bytes:
    """Digest of (key, event time): one record per key per event time, whatever its value."""
    return blake2b(
        _part(key) + event_time.to_bytes(8, "big", signed=True), digest_size=IDENTITY_BYTES
    ).digest()


def _split(path: str) -> tuple[str, ...]:
    return tuple(path.removeprefix("$").removeprefix(".").split("."))


def fields_identity(paths: tuple[str, ...]) -> IdentityFn:
    """Digest of the values at JSON field paths of the record value (e.g. ``order_id``)."""
    split = [(p, _split(p)) for p in paths]

    def identity(key: bytes | None, value: bytes | None, event_time: int) -> bytes:
        if value is None:
            raise IdentityError("record has no value; identity fields need a JSON object")
        try:
            doc = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            raise IdentityError("value is not JSON; identity fields need a JSON object") from None
        parts = []
        for name, steps in split:
            node = doc
            for step in steps:
                if not isinstance(node, dict) or step not in node:
                    raise IdentityError(f"identity field {name!r} is missing from the value")
                node = node[step]
            parts.append(node)
        blob = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
        return blake2b(blob, digest_size=IDENTITY_BYTES).digest()

    return identity


def identity_function(spec: str | tuple[str, ...]) -> IdentityFn:
    if spec == "record":
        return record_identity
    if spec == "key_event_time":
        return key_event_time_identity
    if isinstance(spec, tuple) and spec:
        return fields_identity(spec)
    raise ValueError(f"unknown dedup identity {spec!r}")
