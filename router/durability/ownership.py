"""Only the owner of raw partition ``p`` writes output partition ``p``.

The group can move a partition only after this worker misses ``max.poll.interval.ms``
(librdkafka then leaves the group) or its session expires (the process stalled, or lost the
coordinator). Rebalance callbacks run only in ``consume``, between batches, so the worker
checks its assignment together with the time since its last poll: before a batch's checkpoint
write, right before producing, and after producing (without transactions, after delivery; with
them, the commit is what a newer owner fences). A late discovery stops the worker; the new
owner's foreign-write check (router.durability.output_writer) deals with what was written.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from router.base.errors import OwnershipLost

# Share of max.poll.interval.ms after which a batch no longer counts as owned.
POLL_SHARE = 0.8


@dataclass
class PollClock:
    """When the data consumer last polled, against the group's ``max.poll.interval.ms``."""

    max_poll_s: float = 300.0
    last_poll: float = field(default_factory=time.monotonic)

    def polled(self) -> None:
        self.last_poll = time.monotonic()

    def since_poll(self) -> float:
        return time.monotonic() - self.last_poll

    def left(self, share: float) -> float:
        """Seconds until ``share`` of the poll interval has passed since the last poll."""
        return self.max_poll_s * share - self.since_poll()


def check_ownership(owned: Iterable[tuple[str, int]], inputs: Mapping[str, Sequence[str]],
                    assigned: set[tuple[str, int]], since_poll_s: float, max_poll_s: float,
                    *, after_write: bool = False) -> None:
    """Raise :class:`OwnershipLost` unless every owned (route, partition) is still assigned
    (through any input topic of its route) and the last poll is recent enough that the group
    cannot have moved it."""
    if since_poll_s > max_poll_s * POLL_SHARE:
        what = "the batch's output was written" if after_write else "the batch took"
        raise OwnershipLost(f"{what} later than max.poll.interval.ms allows; the group may "
                            "have moved partitions away; restarting the worker")
    for route, p in owned:
        if not any((t, p) in assigned for t in inputs[route]):
            raise OwnershipLost(f"partition {route}/{p} is no longer assigned to this worker; "
                                "refusing to write its output")
