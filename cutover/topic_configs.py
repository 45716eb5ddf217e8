"""The configs of a route's state topics (control, status, checkpoints), set when they are
created by ``cutover init`` or by a worker.

They are compacted: the newest record per key is the state. A compacted topic's active
segment is never cleaned, and a worker reads these topics at start-up and at every takeover:
with the broker's default ``segment.ms`` (seven days) it would read every record written since
the last roll (a checkpoint per written partition per batch, a status message per worker every
few seconds), and start-up and failover would grow with uptime. Rolled every minute and cleaned
at a low dirty ratio, a state topic holds its live keys and a few minutes of writes.
"""

from __future__ import annotations

STATE_TOPIC_CONFIG: dict[str, str] = {"cleanup.policy": "compact", "segment.ms": "60000",
                                      "min.cleanable.dirty.ratio": "0.1"}
