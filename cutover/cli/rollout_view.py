"""What ``cutover rollout`` shows while it runs.

In a terminal, one screen updated in place (rich): the phase and its timer, the time left to
the deadline, per partition both versions' watermarks and how far each trails the partition's
horizon, records held, and the records forwarded per version since the rollout began. Not in a
terminal (CI logs, a pipe), plain lines: one when a phase starts and one when it ends, and a
progress line now and then. Both print every phase change the same way.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Protocol, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cutover.rollout.events import Observation
from cutover.rollout.journal import Phase, RolloutRecord

PROGRESS_EVERY_S = 15.0


def clock(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def seconds(s: float) -> str:
    s = max(int(s), 0)
    return f"{s // 60}:{s % 60:02d}"


def phase_lines(before: RolloutRecord, after: RolloutRecord, now: datetime) -> list[str]:
    """The lines a phase change prints: the old phase's end (with why), the new one's start."""
    stamp = now.astimezone().strftime("%H:%M:%S")
    lines = []
    if before.phases and before.phase != after.phase:
        took = seconds((now - before.phase_started()).total_seconds())
        why = after.phase.value if after.phase.terminal else after.note
        lines.append(f"[{stamp}] {before.phase.value} ended after {took}: {why}")
    if before.phase != after.phase and not after.phase.terminal:
        step = (f": {after.spec.step_name(after.step)}" if after.spec.canary and after.phase in (
            Phase.SWITCHING, Phase.DRAINING, Phase.CANARY) else "")
        lines.append(f"[{stamp}] {after.phase.value} started{step}")
    return lines


class LiveView(Protocol):
    def changed(self, before: RolloutRecord, after: RolloutRecord, now: datetime) -> None: ...
    def say(self, line: str) -> None: ...
    def update(self, rec: RolloutRecord, obs: Observation, forwarded: dict[str, int]) -> None: ...
    def close(self) -> None: ...


class PlainView:
    """Lines for logs."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._last = 0.0

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def changed(self, before: RolloutRecord, after: RolloutRecord, now: datetime) -> None:
        for line in phase_lines(before, after, now):
            self.say(line)

    def update(self, rec: RolloutRecord, obs: Observation, forwarded: dict[str, int]) -> None:
        now = time.monotonic()
        if now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        s = rec.spec
        lags = []
        for version in (s.old, s.new):
            marks = [f.watermarks.get(version) for f in obs.route.partitions.values()]
            known = [m for m in marks if m is not None]
            low = min(known) if len(known) == len(marks) and known else None
            lags.append(f"{version} wm {clock(low)}")
        held = sum(f.held for f in obs.route.partitions.values())
        fwd = ", ".join(f"{v}={n}" for v, n in sorted(forwarded.items())) or "0"
        took = seconds((obs.now - rec.phase_started()).total_seconds())
        step = f"  {rec.step_line()}" if rec.spec.canary else ""
        self.say(f"  {rec.phase.value} {took}{step}  {'  '.join(lags)}  held {held}  forwarded "
                 f"{fwd}  - {rec.note}")

    def close(self) -> None:
        pass


class RichView:
    """One screen, updated in place."""

    def __init__(self, out: TextIO) -> None:
        self.console = Console(file=out)
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def say(self, line: str) -> None:
        self.console.print(Text(line))

    def changed(self, before: RolloutRecord, after: RolloutRecord, now: datetime) -> None:
        for line in phase_lines(before, after, now):
            self.say(line)

    def update(self, rec: RolloutRecord, obs: Observation, forwarded: dict[str, int]) -> None:
        s = rec.spec
        head = Text()
        head.append(f"route {rec.route}  {s.old} -> {s.new}  ", style="bold")
        head.append(rec.phase.value, style="bold cyan")
        if rec.spec.canary:
            head.append(f"  {rec.step_line()}", style="bold")
        head.append(f"  {seconds((obs.now - rec.phase_started()).total_seconds())} in phase, "
                    f"{seconds((obs.now - rec.started_at).total_seconds())} in all")
        if rec.phase.old_still_running:
            head.append(f", deadline in {seconds((rec.deadline_at - obs.now).total_seconds())}")
        table = Table(box=None, pad_edge=False)
        table.add_column("part", justify="right")
        for version in (s.old, s.new):
            table.add_column(f"wm {version}", justify="right")
            table.add_column("lag", justify="right")
        table.add_column("held", justify="right")
        table.add_column("boundary", justify="right")
        for p in range(obs.route.num_partitions):
            f = obs.route.partitions.get(p)
            if f is None:
                table.add_row(str(p), "(no router status)")
                continue
            cells = [str(p)]
            for version in (s.old, s.new):
                wm = f.watermarks.get(version)
                lag = (f.horizon - wm) / 1000 if wm is not None and f.horizon is not None \
                    else None
                cells += [clock(wm), f"{lag:.0f}s" if lag is not None else "-"]
            cells += [str(f.held), clock(f.boundary)]
            table.add_row(*cells)
        fwd = "  ".join(f"{v} {n}" for v, n in sorted(forwarded.items())) or "none yet"
        foot = Text(f"forwarded since the start: {fwd}\n{rec.note}")
        self.live.update(Group(head, table, foot))

    def close(self) -> None:
        self.live.stop()


def make_view(out: TextIO | None = None) -> LiveView:
    stream = out or sys.stdout
    return RichView(stream) if stream.isatty() else PlainView(stream)
