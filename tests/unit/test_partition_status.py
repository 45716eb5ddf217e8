"""Per-partition epoch and boundary: published from the decision state, used by the CLI."""

from __future__ import annotations

from datetime import UTC, datetime

from rule_support import SetStore, make_plan

from cutover.control.routes import PartitionReport, RouteView
from cutover.plan import CutoverPlan
from cutover.settings import Handover, RouterSettings
from cutover.status import PartitionStatus, RouteStatus, TransitionState, parse_status
from router.rule.decision import Incoming, PartitionRouter
from router.rule.identity import identity_function
from router.worker.status_publisher import StatusBoard

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _routers() -> dict[int, PartitionRouter]:
    s = RouterSettings.model_validate({
        "bootstrap": "k:9092", "routes": [{"name": "r", "inputs": ["r.raw"], "output": "r.out"}]})
    rs = s.routes[0]
    return {p: PartitionRouter(p, identity=identity_function("record"), store=SetStore(),
                               retention_ms=rs.dedup.retention_ms,
                               ordered=rs.handover is Handover.ORDERED) for p in range(2)}


def test_published_status_carries_each_partitions_epoch_and_pinned_boundary() -> None:
    routers = _routers()
    plans: dict[str, CutoverPlan] = {}
    published: list[tuple[str, bytes]] = []
    board = StatusBoard("w1", routes={"r": 2}, plans=plans,
                        partitions=lambda route: routers if route == "r" else {},
                        publish=lambda route, value: published.append((route, value)),
                        interval_s=10.0)
    blue, switch = make_plan(1, (None, "blue")), make_plan(2, (None, "blue"), (100, "green"))
    for p, router in routers.items():
        router.apply_plan(blue)
        if p == 1:  # partition 1 has routed past the boundary when the switch arrives
            router.observe(Incoming("blue", 150, 150, b"k", b"v"))
        router.apply_plan(switch)
    plans["r"] = switch
    st = board.build("r")
    assert st.partitions[0].model_dump(include={"epoch", "boundary", "pinned"}) == {
        "epoch": 2, "boundary": 100, "pinned": ()}
    assert st.partitions[1].model_dump(include={"epoch", "boundary", "pinned"}) == {
        "epoch": 2, "boundary": 151, "pinned": (151,)}
    assert [h.needed for h in st.transition.holdups if h.partition == 1] == [151, 151]
    again = parse_status(st.model_dump_json(by_alias=True).encode())
    assert isinstance(again, RouteStatus) and again.partitions == st.partitions
    board.tick()  # the first tick publishes what it built
    assert [r for r, _ in published] == ["r"]
    assert parse_status(published[0][1]).partitions == st.partitions


def _view(*parts: tuple[int, PartitionStatus, int | None]) -> RouteView:
    v = RouteView("r", plan=make_plan(2, (None, "blue"), (100, "green")), num_partitions=2)
    for p, ps, msg_epoch in parts:
        v.partitions[p] = PartitionReport(ps, ps.epoch if ps.epoch is not None else msg_epoch,
                                          "w", T0)
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
