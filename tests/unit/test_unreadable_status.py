"""What a reader says about a status message it cannot read (cutover.status.unreadable_status):
the worker and the field, for a message that names them; nothing for anything else. And
cutover.status.read_status, which both readers of the status topic use to tell the three apart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

import cutover.status
from cutover.status import (
    PlanRejectedEvent,
    RouteStatus,
    UnreadableStatus,
    parse_status,
    read_status,
    unreadable_status,
)


def _why(message: Any) -> UnreadableStatus | None:
    raw = json.dumps(message).encode()
    with pytest.raises(ValidationError) as exc:
        parse_status(raw)
    return unreadable_status(raw, exc.value)


def test_an_unknown_field_is_named_with_its_path() -> None:
    assert _why({"event": "status", "route": "r", "worker": "w", "lease_ms": 1}) == \
        UnreadableStatus("r", "w", "field 'lease_ms' is not known to this version of cutover")


def test_a_wrong_value_is_named_with_pydantic_s_sentence() -> None:
    got = _why({"event": "status", "route": "r", "worker": "w", "epoch": "x"})
    assert got is not None and got.reason.startswith("epoch: Input should be a valid integer")


def test_an_unknown_event_is_named() -> None:
    assert _why({"event": "lease", "route": "r", "worker": "w"}) == \
        UnreadableStatus("r", "w", "event 'lease' is not known to this version of cutover")


@pytest.mark.parametrize("message", [[1, 2], {"event": "status", "route": "r", "epoch": "x"},
                                     {"event": "status", "worker": 3, "route": "r"}])
def test_a_message_naming_no_route_and_worker_is_not_a_worker_s_status(message: Any) -> None:
    assert _why(message) is None


def test_not_json_is_not_a_worker_s_status() -> None:
    with pytest.raises(ValidationError) as exc:
        parse_status(b"not json")
    assert unreadable_status(b"not json", exc.value) is None


def test_read_status_gives_a_status_it_can_read() -> None:
    st = RouteStatus(route="r", worker="w", epoch=3)
    assert read_status(st.model_dump_json(by_alias=True).encode()) == st
    ev = PlanRejectedEvent(route="r", worker="w", reason="bad plan")
    assert read_status(ev.model_dump_json().encode()) == ev


def test_read_status_names_a_worker_s_status_it_cannot_read() -> None:
    raw = json.dumps({"event": "status", "route": "r", "worker": "w", "lease_ms": 1}).encode()
    assert read_status(raw) == \
        UnreadableStatus("r", "w", "field 'lease_ms' is not known to this version of cutover")


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]",
                                 b'{"event": "status", "route": "r", "epoch": "x"}'])
def test_read_status_skips_what_is_not_a_worker_s_status(raw: bytes) -> None:
    assert read_status(raw) is None


def test_read_status_skips_a_message_refused_by_a_plain_value_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(raw: bytes) -> RouteStatus:
        raise ValueError("not a status")

    monkeypatch.setattr(cutover.status, "parse_status", refuse)
    assert read_status(b"{}") is None
