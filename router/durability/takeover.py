"""Taking over raw partitions: resume from the newest checkpoint, read the output back first.

For each partition assigned to this worker: restore the newest checkpoint's decision state and
resume offsets (no checkpoint: the partition's low offsets); open the local dedup store, which
is a cache: when it is missing or does not belong to that checkpoint (its saved ``seq`` is
neither the checkpoint's nor the one before), it is emptied and rebuilt from the output log,
from the checkpoint's ``rebuild_from`` (the oldest output still inside the dedup retention).
Then, before anything is forwarded, output partition ``p`` is read back from the checkpoint's
``readback_from`` (router.durability.readback): the raw offsets found there at or after the resume
offsets are not forwarded again. One read per output topic serves all partitions taken over at once.
The checkpoint's ownership generation goes up by one, so a previous owner's late checkpoint
never wins (router.durability.checkpoint).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cutover.plan import CutoverPlan
from cutover.settings import Handover
from router.dedup.memory import StoreMemory
from router.dedup.store import DedupStore
from router.durability.checkpoint import Checkpoint
from router.durability.partition import Owned, RouteRuntime
from router.durability.readback import ReadBack, ReadBackFrom, read_back_outputs
from router.durability.resume import Durability, RebuildMark
from router.rule.decision import Outcome, PartitionRouter

log = logging.getLogger("cutover.router")

PartitionKey = tuple[str, int]   # (route, partition)


@dataclass
class Restored:
    """A partition being taken over, before its output partition is read back."""

    route: RouteRuntime
    partition: int
    router: PartitionRouter
    store: DedupStore
    seq: int                  # of the checkpoint resumed from (0: none)
    offsets: dict[str, int]   # resume offsets
    rebuild_from: int
    readback_from: int        # output offset the read-back starts at
    rebuilt: bool             # the local store was missing or stale: refilled by the read-back
    owner_gen: int            # this worker's ownership generation of the partition


def store_path(state_dir: Path, route: str, partition: int) -> Path:
    return Path(state_dir) / route / str(partition)


def restore(rt: RouteRuntime, partition: int, ck: Checkpoint | None, state_dir: Path,
            low_offset: Callable[[str, int], int], memory: StoreMemory) -> Restored:
    """One partition's checkpoint and local store, before the read-back."""
    rs = rt.settings
    path = store_path(state_dir, rs.name, partition)
    store = DedupStore(path, rs.dedup, memory)
    store_seq = int(store.get_meta("seq") or b"0")
    if ck is not None:
        offsets = dict(ck.offsets)
        seq, rebuild_from, start = ck.seq, ck.rebuild_from, ck.readback_from
        stale = store_seq not in (ck.seq, ck.seq - 1)
        gen = ck.owner_gen + 1
    else:
        offsets, seq, rebuild_from, start, stale = {}, 0, 0, 0, store_seq != 0
        gen = 1
    for t in rs.inputs:
        offsets.setdefault(t, low_offset(t, partition))
    if stale:
        store.destroy()
        shutil.rmtree(path, ignore_errors=True)
        store = DedupStore(path, rs.dedup, memory)
        start = min(start, rebuild_from)
    router = PartitionRouter(partition, identity=rt.identity, store=store,
                             retention_ms=rs.dedup.retention_ms,
                             ordered=rs.handover is Handover.ORDERED, max_held=rs.max_held,
                             future_tolerance_ms=rs.future_tolerance_ms)
    if ck is not None:
        router.restore(ck.snapshot)
    return Restored(rt, partition, router, store, seq, offsets, rebuild_from, start, stale, gen)


def take_over(conf: dict[str, Any], routes: Mapping[str, RouteRuntime],
              plans: Mapping[str, CutoverPlan], checkpoints: Mapping[PartitionKey,
                                                                     Checkpoint | None],
              state_dir: Path, low_offset: Callable[[str, int], int], memory: StoreMemory,
              atomic: bool = False) -> dict[PartitionKey, Owned]:
    """Take over partitions: restore each one's newest checkpoint, then read its output
    partition back (one read per output topic for all partitions taken over), then apply the
    plan held. ``atomic``: each batch's output commits with its checkpoint (transactions;
    router.durability.resume.Durability.resume_point)."""
    restored = {(route, p): restore(routes[route], p, ck, state_dir, low_offset, memory)
                for (route, p), ck in checkpoints.items()}
    readbacks: dict[PartitionKey, ReadBack] = {}
    for route in {r for r, _ in restored}:
        rt = routes[route]
        wanted = {p: ReadBackFrom(r.readback_from, r.offsets, r.store)
                  for (rn, p), r in restored.items() if rn == route}
        for p, rb in read_back_outputs(conf, rt.settings.output, wanted, rt.identity).items():
            readbacks[(route, p)] = rb
    out: dict[PartitionKey, Owned] = {}
    for key, r in restored.items():
        route, p = key
        rb = readbacks[key]
        plan = plans.get(route)
        if plan is not None and any(d.outcome is not Outcome.HOLD
                                    for d in r.router.apply_plan(plan)):
            raise AssertionError("a fresh partition released records")  # nothing is held yet
        log.info("partition %s/%d: resume at %s, checkpoint seq %d, %s store, read back %d "
                 "output records from %d (%d already forwarded past the resume point)",
                 route, p, r.offsets, r.seq, "rebuilt" if r.rebuilt else "kept", rb.records,
                 r.readback_from, len(rb.forwarded))
        durability = Durability(next_offsets=r.offsets, out_pos=rb.end, known_end=rb.end,
                                rebuild_from=r.rebuild_from, seq=r.seq, owner_gen=r.owner_gen,
                                skip=rb.forwarded, atomic=atomic)
        durability.rebuild_marks.append(RebuildMark(r.router.horizon or 0, r.rebuild_from))
        out[key] = Owned(r.route, p, r.router, r.store, durability)
    return out
