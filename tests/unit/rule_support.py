"""What the routing-rule tests share: a set as the dedup store, and plans from tuples."""

from __future__ import annotations

from cutover.plan import CutoverPlan


class SetStore(set):
    """Identities in a set: the rule only needs ``in`` and ``add``."""

    def add(self, identity: bytes, event_time: int = 0) -> None:
        super().add(identity)


def make_plan(epoch: int, *segments: tuple[int | None, str]) -> CutoverPlan:
    return CutoverPlan(route="r", epoch=epoch, segments=[
        {"from_event_time": t, "primary": v} for t, v in segments])
