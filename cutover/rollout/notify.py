"""What a rollout tells CI systems and chat: one JSON object per change that matters (a phase
entered, a gate reached, a promote, a pause, a resume), written as a line to ``--events FILE``
(``-``: stdout) and posted to ``--notify URL``.

The post is a webhook: tried again with a growing wait when it fails, from a thread of its own
with a bounded queue, so a slow or dead endpoint never holds the rollout back; when the queue
is full the oldest event is dropped and the next one says how many were. At the end of the
rollout the sink waits a few seconds for the queue to empty, then leaves it.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from cutover.rollout.journal import Gate, Phase, RolloutRecord

QUEUE = 1000
TRIES = 5
FIRST_WAIT_S = 1.0


class Change(StrEnum):
    PHASE = "phase"          # a phase was entered (a terminal one ends the rollout)
    WAITING = "waiting"      # a gate was reached: it waits for `cutover rollout promote`
    PROMOTED = "promoted"
    PAUSED = "paused"
    RESUMED = "resumed"


class RolloutEvent(BaseModel):
    """One line of ``--events``, one body of ``--notify``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    change: Change
    route: str
    run_id: str
    old: str
    new: str
    phase: Phase
    previous_phase: Phase | None = None
    gate: Gate | None = None
    at: datetime
    note: str
    outcome: str | None = None
    dropped: int = 0         # events the webhook queue dropped before this one


def changes(before: RolloutRecord, after: RolloutRecord, now: datetime) -> list[RolloutEvent]:
    """The events between two successive records of a rollout."""
    def event(change: Change, gate: Gate | None = None) -> RolloutEvent:
        return RolloutEvent(change=change, route=after.route, run_id=after.run_id,
                            old=after.spec.old, new=after.spec.new, phase=after.phase,
                            previous_phase=before.phase if before.phase != after.phase else None,
                            gate=gate, at=now, note=after.note, outcome=after.outcome)

    out = []
    if after.phase != before.phase:
        out.append(event(Change.PHASE))
    for gate in after.promoted:
        if gate not in before.promoted:
            out.append(event(Change.PROMOTED, gate))
    if after.waiting_at is not None and after.waiting_at != before.waiting_at:
        out.append(event(Change.WAITING, after.waiting_at))
    if after.paused_by is not None and before.paused_by is None:
        out.append(event(Change.PAUSED))
    if after.paused_by is None and before.paused_by is not None:
        out.append(event(Change.RESUMED))
    return out


Post = Callable[[str, bytes], None]


def http_post(url: str, body: bytes) -> None:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        resp.read()


class EventSink:
    """Where a rollout's events go: a file or stdout, and a webhook."""

    def __init__(self, events: str | None, notify: str | None, *, post: Post = http_post,
                 say: Callable[[str], None] = lambda line: None,
                 first_wait_s: float = FIRST_WAIT_S) -> None:
        self._stdout: TextIO | None = sys.stdout if events == "-" else None
        self._file = Path(events) if events and events != "-" else None
        self.notify, self._post, self._say, self._wait = notify, post, say, first_wait_s
        self._queue: queue.Queue[RolloutEvent] = queue.Queue(QUEUE)
        self._dropped = 0
        self.sent = 0
        self.failed = 0
        self._thread: threading.Thread | None = None
        if notify:
            self._thread = threading.Thread(target=self._send_all, name="notify", daemon=True)
            self._thread.start()

    def changed(self, before: RolloutRecord, after: RolloutRecord, now: datetime) -> None:
        for ev in changes(before, after, now):
            self.emit(ev)

    def emit(self, ev: RolloutEvent) -> None:
        line = ev.model_dump_json() + "\n"
        if self._stdout is not None:
            self._stdout.write(line)
            self._stdout.flush()
        if self._file is not None:   # appended line by line: a resumed rollout goes on writing
            with self._file.open("a") as f:
                f.write(line)
        if self._thread is None:
            return
        while True:
            try:
                self._queue.put_nowait(ev.model_copy(update={"dropped": self._dropped}))
                self._dropped = 0
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self._dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout: float = 10.0) -> None:
        """Give the webhook up to ``timeout`` seconds to send what is queued."""
        if self._thread is not None:
            deadline = time.monotonic() + timeout
            while self._queue.unfinished_tasks and time.monotonic() < deadline:
                time.sleep(0.05)

    def _send_all(self) -> None:
        assert self.notify is not None
        while True:
            ev = self._queue.get()
            body = json.dumps(ev.model_dump(mode="json")).encode()
            wait = self._wait
            for attempt in range(1, TRIES + 1):
                try:
                    self._post(self.notify, body)
                    self.sent += 1
                    break
                except Exception as exc:  # any failure of the endpoint: try again, then say so
                    if attempt == TRIES:
                        self.failed += 1
                        self._say(f"  --notify: gave up posting the {ev.change.value} event "
                                  f"after {TRIES} tries ({exc})")
                        break
                    time.sleep(wait)
                    wait *= 2
            self._queue.task_done()
