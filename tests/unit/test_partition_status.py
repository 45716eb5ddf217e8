"""Per-partition epoch and boundary: published from the decision state, used by the CLI."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rule_support import make_plan

from cutover.settings import Handover, RouterSettings
from cutover.status import PartitionStatus, RouteStatus, TransitionState, parse_status
from router.datapath import DataPath, Owned, RouteRuntime
from router.decision import Incoming, PartitionRouter
from router.dedup_store import DedupStore
from router.identity import identity_function
from router.operator import RouteView

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _engine(tmp_path: Path) -> DataPath:
    s = RouterSettings.model_validate({
        "bootstrap": "k:9092", "state_dir": str(tmp_path),
        "routes": [{"name": "r", "inputs": ["r.raw"], "output": "r.out"}]})
    eng = DataPath(s, worker_id="w1")
    rs = s.routes[0]
    rt = RouteRuntime(rs, identity_function("record"), 2)
    eng.routes["r"] = rt
    for p in range(2):
        store = DedupStore(tmp_path / str(p))
        pr = PartitionRouter(p, identity=rt.identity, store=store,
                             retention_ms=rs.dedup.retention_ms,
                             ordered=rs.handover is Handover.ORDERED)
        eng.owned[("r", p)] = Owned(rt, p, pr, store, 0, {}, set(), 0, 0)
    return eng


def test_published_status_carries_each_partitions_epoch_and_pinned_boundary(
        tmp_path: Path) -> None:
    eng = _engine(tmp_path)
    blue, switch = make_plan(1, (None, "blue")), make_plan(2, (None, "blue"), (100, "green"))
    for (_, p), owned in eng.owned.items():
        owned.router.apply_plan(blue)
        if p == 1:  # partition 1 has routed past the boundary when the switch arrives
            owned.router.observe(Incoming("blue", 150, 150, b"k", b"v"))
        owned.router.apply_plan(switch)
    eng.book.restore(switch)
    st = eng.board.build("r")
    assert st.partitions[0].model_dump(include={"epoch", "boundary", "pinned"}) == {
        "epoch": 2, "boundary": 100, "pinned": ()}
    assert st.partitions[1].model_dump(include={"epoch", "boundary", "pinned"}) == {
        "epoch": 2, "boundary": 151, "pinned": (151,)}
    assert [h.needed for h in st.transition.holdups if h.partition == 1] == [151, 151]
    again = parse_status(st.model_dump_json(by_alias=True).encode())
    assert isinstance(again, RouteStatus) and again.partitions == st.partitions
    for owned in eng.owned.values():
        owned.store.close()


def _view(*parts: tuple[int, PartitionStatus, int | None]) -> RouteView:
    v = RouteView("r", plan=make_plan(2, (None, "blue"), (100, "green")), num_partitions=2)
    for p, ps, msg_epoch in parts:
        v.partitions[p] = (ps, ps.epoch if ps.epoch is not None else msg_epoch, "w", T0)
    return v


def test_cli_readiness_uses_the_partitions_own_epoch_and_boundary() -> None:
    wms = {"blue": 140, "green": 140}
    v = _view((0, PartitionStatus(epoch=2, boundary=100, watermarks=wms), 2),
              (1, PartitionStatus(epoch=2, boundary=151, watermarks=wms), 2))
    tr = v.transition()
    assert tr.state is TransitionState.PENDING
    assert {(h.partition, h.needed) for h in tr.holdups} == {(1, 151)}
    # A partition still on epoch 1 holds the transition back even if its worker's message
    # already names epoch 2 (the worker's plan is not the partition's).
    v = _view((0, PartitionStatus(epoch=2, boundary=100, watermarks=wms), 2),
              (1, PartitionStatus(epoch=1, watermarks=wms), 2))
    assert [h.why for h in v.transition().holdups] == [
        "no router has applied epoch 2 here yet"]


def test_status_without_partition_epoch_falls_back_to_the_message_epoch() -> None:
    old = PartitionStatus.model_validate({"horizon": 5, "watermarks": {"blue": 120,
                                          "green": 120}, "pinned": [], "held": 0})
    v = _view((0, old, 2), (1, old, 2))
    assert v.transition().state is TransitionState.CLEAR_TO_TEARDOWN
