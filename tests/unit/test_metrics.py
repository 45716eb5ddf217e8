"""A worker's /metrics by Prometheus' conventions: counters that never go down though
partitions move away, seconds for times, dead letters by reason, plan rejections, the build,
and a text every line of which Prometheus can read."""

from __future__ import annotations

import re

import confluent_kafka
from metrics_support import idle_nudger
from rule_support import SetStore, make_plan

from cutover.plan import CutoverPlan, PlanRejected
from router.base.metrics import METRICS
from router.dedup.memory import StoreMemory
from router.rule.decision import Incoming, PartitionCounters, PartitionRouter
from router.rule.identity import identity_function
from router.worker.control import PlanRefused
from router.worker.status_publisher import (
    DeadLetterReason,
    StatusBoard,
    dead_letter_reason,
)
from router.worker.watchdog import Progress

PLAN = make_plan(1, (None, "blue"))


def _router(p: int) -> PartitionRouter:
    r = PartitionRouter(p, identity=identity_function("record"), store=SetStore(),
                        retention_ms=3_600_000, ordered=True)
    r.apply_plan(PLAN)
    return r


def _forward(r: PartitionRouter, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        r.observe(Incoming("blue", 1000 + i, 1000 + i, f"k{i}".encode(), b"v"))


class Worker:
    """A board over partitions that come and go, as a rebalance moves them."""

    def __init__(self) -> None:
        self.owned: dict[int, PartitionRouter] = {}
        plans: dict[str, CutoverPlan] = {"r": PLAN}
        self.board = StatusBoard("w1", routes={"r": 2}, plans=plans,
                                 partitions=lambda route: self.owned, publish=lambda r, v: None,
                                 interval_s=10.0)

    def sample(self, name: str, **labels: str) -> float:
        self.board.tick()
        want = ",".join(f'{k}="{v}"' for k, v in {"route": "r", **labels}.items())
        m = re.search(rf"^cutover_{name}\{{{re.escape(want)}\}} (\S+)$", self.board.prometheus(),
                      re.M)
        assert m is not None, f"no cutover_{name}{{{want}}}"
        return float(m.group(1))


def test_forwarded_total_does_not_drop_when_a_rebalance_moves_a_partition_away() -> None:
    w = Worker()
    w.owned = {0: _router(0), 1: _router(1)}
    _forward(w.owned[0], 10)
    _forward(w.owned[1], 5)
    assert w.sample("forwarded_total") == 15
    del w.owned[1]                       # partition 1 moved to another worker
    assert w.sample("forwarded_total") == 15
    w.owned[1] = _router(1)              # and came back: a new decision state, from zero
    _forward(w.owned[1], 3, start=100)
    assert w.sample("forwarded_total") == 18
    assert w.sample("partition_forwarded_total", partition="1") == 8


def test_a_partition_released_by_the_data_path_is_counted_once() -> None:
    w = Worker()
    w.owned = {0: _router(0)}
    _forward(w.owned[0], 4)
    w.board.tick()
    _forward(w.owned[0], 2, start=50)    # after the last tick, before the release
    gone = w.owned.pop(0)
    w.board.partition_released("r", 0, gone.counters)
    assert w.sample("forwarded_total") == 6


def test_dead_letters_are_counted_by_a_reason_of_bounded_cardinality() -> None:
    r = _router(0)
    _forward(r, 1, start=10_000_000)     # the horizon far ahead: an old record is beyond retention
    old = r.observe(Incoming("blue", 1000, 1000, b"old", b"v"))
    assert [dead_letter_reason(d.reason or "") for d in old] == [
        DeadLetterReason.BEYOND_RETENTION]
    assert dead_letter_reason("event time 9 is 700000 ms ahead ... a poison timestamp would "
                              "move the partition's horizon") is DeadLetterReason.POISON_TIMESTAMP
    assert dead_letter_reason("identity field 'order_id' is missing from the value") \
        is DeadLetterReason.IDENTITY
    assert dead_letter_reason("missing header bg.version") is DeadLetterReason.BAD_HEADERS
    w = Worker()
    w.board.dead_lettered("r", old[0].reason or "", 2)
    assert w.sample("dead_letters_total", reason="beyond_retention") == 2


def test_each_rejected_plan_is_counted() -> None:
    w = Worker()
    assert w.sample("plan_rejections_total") == 0
    for _ in range(2):
        w.board.control_event(PlanRefused(route="r", rejected=PlanRejected("bad", 3, "r")))
    assert w.sample("plan_rejections_total") == 2


def test_times_are_in_seconds_and_a_lag_per_partition_is_exported() -> None:
    w = Worker()
    w.owned = {0: _router(0)}
    _forward(w.owned[0], 1, start=5000)  # horizon 6000 ms
    w.owned[0].observe(Incoming("blue", None, 4000, heartbeat=True))
    assert w.sample("horizon_seconds", partition="0") == 6.0
    assert w.sample("watermark_seconds", partition="0", version="blue") == 4.0
    assert w.sample("watermark_lag_seconds", partition="0", version="blue") == 2.0
    w.board.lag("r", 0, 42)
    assert w.sample("consumer_lag_records", partition="0") == 42
    w.board.latency("r", 0.02, 3)
    w.board.latency("r", 3.0)
    assert w.sample("added_latency_seconds_bucket", le="0.025") == 3
    assert w.sample("added_latency_seconds_bucket", le="+Inf") == 4
    assert w.sample("added_latency_seconds_count") == 4


def test_a_released_partition_s_lag_is_no_longer_exported() -> None:
    w = Worker()
    w.board.lag("r", 0, 42)
    w.board.lag("r", 1, 7)
    w.board.partition_released("r", 0, PartitionCounters())
    assert w.sample("consumer_lag_records", partition="1") == 7
    assert 'cutover_consumer_lag_records{route="r",partition="0"}' not in w.board.prometheus()


def test_every_line_is_prometheus_text_and_every_declared_family_is_exported() -> None:
    w = Worker()
    w.owned = {0: _router(0)}
    _forward(w.owned[0], 3)
    w.board.lag("r", 0, 1)
    w.board.latency("r", 0.1)
    w.board.dead_lettered("r", "missing header bg.version")
    w.board.tick()
    progress = Progress(stall_after_s=30.0)
    progress.stall("nothing decided")
    progress.rebuilt()
    # the worker's /metrics (router.worker.app)
    text = (w.board.prometheus() + progress.prometheus() + idle_nudger().prometheus()
            + StoreMemory().prometheus())
    sample = re.compile(r'^(cutover_[a-z_]+)(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+]+$')
    declared: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            declared[name] = kind
        elif not line.startswith("# HELP "):
            m = sample.match(line)
            assert m is not None, line
            family = re.sub(r"_(bucket|sum|count)$", "", m.group(1)) \
                if declared.get(re.sub(r"_(bucket|sum|count)$", "", m.group(1))) == "histogram" \
                else m.group(1)
            assert family in declared, line
    # METRICS is the one list of names (the alert rules' test reads it): all exported, no other
    assert {f"cutover_{n}" for n in METRICS} == set(declared)
    assert "cutover_worker_stalled 1" in text.splitlines()
    assert "cutover_worker_rebuilds_total 1" in text.splitlines()
    for name, kind in declared.items():
        assert (kind == "counter") == name.endswith("_total"), name
        assert not name.endswith("_ms") or "deprecated" in METRICS[name[8:]][1], name
    assert re.search(r'^cutover_build_info\{version="[^"]+",.*\} 1$', text, re.M)
    # the client's whole version (version() gives it as a string), not its first character
    assert f'confluent_kafka="{confluent_kafka.version()}"' in text
