"""How the operator commands read times and durations typed by a person."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from cutover.cli.errors import CliError
from cutover.control.next_plan import At

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise CliError(f"{text!r} is not a duration; write e.g. 500ms, 30s, 10m, 2h")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])


def parse_deadline(text: str, now: datetime) -> datetime:
    """A duration from now (``15m``, ``+2h``), epoch ms or an ISO-8601 time."""
    relative = text.strip().removeprefix("+")
    if _DURATION.match(relative):
        return now + timedelta(milliseconds=parse_duration_ms(relative))
    return datetime.fromtimestamp(parse_instant_ms(text) / 1000, UTC)


def parse_instant_ms(text: str) -> int:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
                       "(e.g. 2026-01-01T00:10:00Z)") from None
    if dt.tzinfo is None:
        raise CliError(f"{text!r} has no time zone; add Z or +00:00")
    return int(dt.timestamp() * 1000)


def parse_at(text: str) -> At:
    """``switch --at``: ``auto``, ``+duration`` (past the newest horizon), epoch ms or
    ISO-8601."""
    if text == "auto":
        return At("auto")
    if text.startswith("+"):
        return At("ahead", parse_duration_ms(text[1:]))
    return At("instant", parse_instant_ms(text))
