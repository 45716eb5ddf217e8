"""How the operator CLI reads times and durations typed by a person."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cutover.cli import CliError
from cutover.cli.times import parse_deadline, parse_duration_ms, parse_instant_ms

NOW = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "after"), [
    ("15m", timedelta(minutes=15)), ("+15m", timedelta(minutes=15)),
    ("90s", timedelta(seconds=90)), ("+2h", timedelta(hours=2)), ("500ms", timedelta(0, 0.5)),
])
def test_deadline_as_duration_from_now(text: str, after: timedelta) -> None:
    assert parse_deadline(text, NOW) == NOW + after


def test_deadline_as_instant() -> None:
    assert parse_deadline("2026-01-01T00:10:00Z", NOW) == NOW + timedelta(minutes=10)
    assert parse_deadline("1767226200000", NOW) == NOW + timedelta(minutes=10)


@pytest.mark.parametrize("text", ["soon", "15 minutes", "+", "10x"])
def test_unreadable_deadline_says_what_to_write(text: str) -> None:
    with pytest.raises(CliError, match="ISO-8601"):
        parse_deadline(text, NOW)


def test_duration_and_instant_errors_give_examples() -> None:
    with pytest.raises(CliError, match="10m"):
        parse_duration_ms("ten minutes")
    with pytest.raises(CliError, match="2026-01-01T00:10:00Z"):
        parse_instant_ms("tomorrow")
    assert parse_instant_ms("2026-01-01T00:00:00+00:00") == int(NOW.timestamp() * 1000)
