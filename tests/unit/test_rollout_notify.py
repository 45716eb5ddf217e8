"""--events and --notify: one JSON object per change that matters, written as a line and posted
to a webhook that is retried and never holds the rollout back."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

from rollout_support import T0, record, spec

from cutover.rollout.journal import Gate, Phase
from cutover.rollout.notify import Change, EventSink, RolloutEvent, changes

NOW = T0 + timedelta(seconds=5)


def test_a_phase_change_a_gate_a_promote_and_a_pause_each_make_one_event() -> None:
    before = record(Phase.CATCHING_UP, spec=spec(pause_before=("switch",)))
    waiting = before.model_copy(update={"waiting_at": Gate.SWITCH, "note": "waiting"})
    assert [e.change for e in changes(before, waiting, NOW)] == [Change.WAITING]
    promoted = waiting.model_copy(update={"waiting_at": None, "promoted": (Gate.SWITCH,)})
    assert [(e.change, e.gate) for e in changes(waiting, promoted, NOW)] == [
        (Change.PROMOTED, Gate.SWITCH)]
    switching = promoted.model_copy(update={"phase": Phase.SWITCHING})
    [ev] = changes(promoted, switching, NOW)
    assert (ev.change, ev.previous_phase, ev.phase) == (Change.PHASE, Phase.CATCHING_UP,
                                                       Phase.SWITCHING)
    paused = switching.model_copy(update={"paused_by": "ops"})
    assert [e.change for e in changes(switching, paused, NOW)] == [Change.PAUSED]
    assert [e.change for e in changes(paused, switching, NOW)] == [Change.RESUMED]
    assert changes(switching, switching.model_copy(update={"note": "x"}), NOW) == []


def _event(i: int) -> RolloutEvent:
    return RolloutEvent(change=Change.PHASE, route="r", run_id="run", old="blue", new="green",
                        phase=Phase.DRAINING, at=T0, note=f"n{i}")


def test_events_are_appended_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"earlier": "run"}\n')
    sink = EventSink(str(path), None)
    sink.emit(_event(1))
    sink.emit(_event(2))
    lines = path.read_text().splitlines()
    assert lines[0] == '{"earlier": "run"}'
    assert [json.loads(x)["note"] for x in lines[1:]] == ["n1", "n2"]


def test_a_failing_webhook_is_tried_again_and_never_holds_the_rollout_back() -> None:
    posted: list[dict[str, object]] = []
    calls = {"n": 0}
    gate = threading.Event()

    def post(url: str, body: bytes) -> None:
        calls["n"] += 1
        gate.wait(5)                     # a slow endpoint
        if calls["n"] == 1:
            raise OSError("connection refused")
        posted.append(json.loads(body))

    sink = EventSink(None, "http://hooks.example/x", post=post, first_wait_s=0.01)
    t0 = time.monotonic()
    for i in range(3):
        sink.emit(_event(i))
    assert time.monotonic() - t0 < 0.5, "emit waited for the webhook"
    gate.set()
    sink.close(timeout=5)
    assert [p["note"] for p in posted] == ["n0", "n1", "n2"]
    assert calls["n"] == 4 and sink.sent == 3 and sink.failed == 0


def test_an_endpoint_that_never_answers_is_given_up_with_a_sentence() -> None:
    said: list[str] = []

    def post(url: str, body: bytes) -> None:
        raise OSError("no route to host")

    sink = EventSink(None, "http://hooks.example/x", post=post, say=said.append,
                     first_wait_s=0.001)
    sink.emit(_event(0))
    sink.close(timeout=5)
    assert sink.failed == 1 and "gave up posting the phase event after 5 tries" in said[0]
