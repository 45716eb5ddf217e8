"""One way to turn a pydantic ValidationError into sentences an operator can act on."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationError


def location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(exc: ValidationError) -> list[str]:
    """One line per problem: ``unknown key 'a.b'``, ``missing required key 'x'``, ``a.b: msg``.

    A container's "too short" error is dropped when one of its items failed, since the item's
    error is the real one.
    """
    errors = exc.errors()
    failed_prefixes = {e["loc"][:-1] for e in errors if len(e["loc"]) > 1}
    lines = []
    for err in errors:
        loc = location(err["loc"])
        if err["type"] == "too_short" and any(
            p[: len(err["loc"])] == err["loc"] for p in failed_prefixes
        ):
            continue
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        elif err["type"] == "missing":
            lines.append(f"missing required key {loc!r}")
        else:
            lines.append(f"{loc or 'value'}: {err['msg'].removeprefix('Value error, ')}")
    return lines


# A route name: also a Kafka record key and part of topic names.
RouteName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,128}$")]
