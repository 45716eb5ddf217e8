"""A route as the worker runs it, and one raw partition of it that the worker owns."""

from __future__ import annotations

from dataclasses import dataclass, field

from cutover.settings import RouteSettings
from router.dedup.store import DedupStore
from router.durability.resume import Durability, Ref
from router.rule.decision import PartitionRouter
from router.rule.held_bound import HeldBound
from router.rule.identity import IdentityFn
from router.rule.oversize import DEFAULT_LIMIT


@dataclass
class RouteRuntime:
    settings: RouteSettings
    identity: IdentityFn
    num_partitions: int
    # The largest record its producers take (router.rule.oversize): the smallest max.message.bytes
    # of its output, dead-letter and shadow topics, less room for a batch header.
    max_record_bytes: int = DEFAULT_LIMIT


@dataclass
class Owned:
    """One raw partition of one route owned by this worker: its routing rule, its dedup store
    and its resume bookkeeping. Output partition ``partition`` of the route is written by this
    worker alone while it owns the raw partition."""

    route: RouteRuntime
    partition: int
    router: PartitionRouter
    store: DedupStore
    durability: Durability
    # Paused (over max_held) or rewinding raw topics of this partition; empty almost always.
    bound: HeldBound = field(default_factory=HeldBound)

    def held_refs(self) -> list[Ref]:
        """The raw records the rule holds (ordered handover), and the first record of each
        topic not kept over ``max_held``: resume offsets stay at them."""
        refs = [rec.ref for rec in self.router.held]
        refs.extend(Ref(topic, offset, None, out_pos)
                    for topic, offset, out_pos in self.bound.resume_floor())
        return refs
