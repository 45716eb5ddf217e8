"""What a rollout prints: the phase lines, the progress of the plain view, the screen of the
live view, and the rollout's line in ``cutover status``."""

from __future__ import annotations

import io
from datetime import timedelta

from rollout_support import SWITCH, T0, observe, part, record, spec

from cutover.cli.rollout_view import PlainView, RichView, phase_lines
from cutover.cli.status import describe_rollout
from cutover.rollout.journal import Phase, PhaseSpan


def test_a_phase_change_prints_the_end_with_why_and_the_start() -> None:
    before = record(Phase.CATCHING_UP)
    after = before.model_copy(update={"phase": Phase.SWITCHING, "note": "green caught up"})
    lines = phase_lines(before, after, T0 + timedelta(seconds=75))
    assert [line.split("] ", 1)[1] for line in lines] == [
        "CATCHING_UP ended after 1:15: green caught up", "SWITCHING started"]
    done = before.model_copy(update={"phase": Phase.DONE, "note": "the long sentence"})
    assert phase_lines(before, done, T0)[0].endswith("CATCHING_UP ended after 0:00: DONE")


def test_the_plain_view_prints_progress_now_and_then() -> None:
    out = io.StringIO()
    view = PlainView(out)
    rec = record(Phase.DRAINING, note="waiting for CLEAR_TO_TEARDOWN")
    obs = observe(part(60_000, 61_000, epoch=2, horizon=62_000), plan=SWITCH)
    view.update(rec, obs, {"blue": 10, "green": 3})
    view.update(rec, obs, {"blue": 11, "green": 4})   # within the quiet period: nothing
    text = out.getvalue()
    assert text.count("\n") == 1
    assert "DRAINING 0:10  blue wm 00:01:00  green wm 00:01:01  held 0" in text
    assert "forwarded blue=10, green=3  - waiting for CLEAR_TO_TEARDOWN" in text


def test_the_live_view_draws_each_partition() -> None:
    out = io.StringIO()
    view = RichView(out)
    view.console.width = 120
    rec = record(Phase.CATCHING_UP, note="partition 1: green 36s behind blue")
    view.update(rec, observe(part(60_000, 55_000, horizon=61_000),
                             part(60_000, 24_000, horizon=60_500)), {"blue": 7})
    view.close()
    text = out.getvalue()
    for words in ("route r  blue -> green  CATCHING_UP", "wm blue", "wm green",
                  "00:00:55   6s", "00:00:24  36s", "forwarded since the start: blue 7",
                  "partition 1: green 36s behind blue"):
        assert words in text, (words, text)


def test_a_rollout_by_key_share_shows_its_step_and_share_everywhere() -> None:
    s = spec(canary=(0.05, 0.25, 1.0))
    rec = record(Phase.CANARY, spec=s, step=1, switch_epoch=3, note="watching")
    assert rec.step_line() == "step 2/3 (25% of the keys) of 5%, 25%, 100%"
    out = io.StringIO()
    PlainView(out).update(rec, observe(part(60_000, 61_000, epoch=3, horizon=62_000)), {})
    assert "CANARY 0:10  step 2/3 (25% of the keys) of 5%, 25%, 100%" in out.getvalue()
    screen = io.StringIO()
    live = RichView(screen)
    live.console.width = 140
    live.update(rec, observe(part(60_000, 61_000, epoch=3, horizon=62_000)), {})
    live.close()
    assert "CANARY  step 2/3 (25% of the keys) of 5%, 25%, 100%" in screen.getvalue()
    line = describe_rollout(rec, T0 + timedelta(seconds=5))
    assert line.startswith("rollout blue -> green: CANARY, step 2/3 (25% of the keys) of 5%, "
                           "25%, 100% (since")
    before = rec.model_copy(update={"phase": Phase.CANARY, "step": 0})
    after = rec.model_copy(update={"phase": Phase.SWITCHING})
    assert phase_lines(before, after, T0)[1].endswith(
        "SWITCHING started: step 2/3 (25% of the keys)")
    assert record(Phase.DRAINING).step_line() is None


def test_cutover_status_names_the_phase_and_who_drives_it() -> None:
    rec = record(Phase.DRAINING, note="waiting", updated_at=T0 + timedelta(seconds=58),
                 phases=(PhaseSpan(phase=Phase.DRAINING, started_at=T0),))
    line = describe_rollout(rec, T0 + timedelta(seconds=61))
    assert line.startswith("rollout blue -> green: DRAINING (since 00:00:00Z, 1:01)")
    assert "pid 1 on h, heard 3s ago: waiting" in line
    gone = describe_rollout(rec.model_copy(update={"owner": None}), T0)
    assert "driven by nobody: resume it with `cutover rollout --resume`" in gone
    over = rec.model_copy(update={"phase": Phase.DONE, "outcome": "all good"})
    assert describe_rollout(over, T0).endswith(": all good")
