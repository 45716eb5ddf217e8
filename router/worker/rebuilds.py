"""How often a worker rebuilds its clients before it leaves that to its supervisor.

A client error the worker cannot go on from (a fatal consumer error such as a fenced static
member, lost partitions, a fenced or conflicting transaction, a stall) is handled by rebuilding
the data consumer and the partitions' producers and rejoining the group (router.worker.datapath).
Rebuilds back off, and a run of them with no record decided in between ends the worker with
the last reason: a rebuild that cannot help is not retried for ever while the worker looks
alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.base.errors import RouterError

FIRST_DELAY_S = 0.25
MAX_DELAY_S = 8.0


class RebuildsExhausted(RouterError):
    """Rebuilds in a row did not bring progress: the worker exits for its supervisor."""


@dataclass
class RebuildBudget:
    """Rebuilds in a row with no progress between them, at most ``max_in_row``."""

    max_in_row: int
    in_row: int = 0

    def progressed(self) -> None:
        self.in_row = 0

    def spend(self, reason: str) -> float:
        """Count one rebuild for ``reason``; the delay to wait before it (doubling from
        ``FIRST_DELAY_S``), or :class:`RebuildsExhausted` past ``max_in_row``."""
        self.in_row += 1
        if self.in_row > self.max_in_row:
            raise RebuildsExhausted(
                f"{self.max_in_row} client rebuilds in a row brought no progress (last: "
                f"{reason}); exiting so that the supervisor restarts the worker")
        return 0.0 if self.in_row == 1 else min(FIRST_DELAY_S * 2 ** (self.in_row - 2),
                                                 MAX_DELAY_S)
