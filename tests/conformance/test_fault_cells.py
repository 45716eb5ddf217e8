"""Fault cells: each fault of the chaos soak on its own, on Apache Kafka with broker defaults.

A cell is a short chaos run (tests/soak/chaos.py) with one fault: a route on six partitions, two
workers with instance ids, both versions writing all along, a switch every 30 s, then the fault
and 30 s more. It passes when the output read ``read_committed`` holds every record exactly
once, from the primary of its event time and in order at each boundary, and no partition's
output stayed silent more than ``STUCK_S`` beyond its input (the 10 s target is the soak's, on a
quiet machine; a cell catches a route that stops).

``make conformance`` runs every fault ``CONFORMANCE_FAULT_REPEAT`` times (5 by default), each a
fresh route, so a fault that fails one time in several shows, and writes the section "Fault
cells" of docs/conformance.md. The default suite runs the two that stopped routes before, the
group coordinator's kill and the zombie worker, once each and short (about four minutes with
the cluster's start on a loaded 2-core machine).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testground.kafka_broker import KafkaCluster, kafka_version
from tests.conformance import report
from tests.conformance.fault_cell import FaultCell, describe, failures
from tests.soak.chaos import ChaosResult, ChaosSettings, chaos_run
from tests.soak.cluster_faults import FaultKind

SEED = int(os.environ.get("CONFORMANCE_SEED", "20260101"))
REPEAT = int(os.environ.get("CONFORMANCE_FAULT_REPEAT", "5"))
CI_FAULTS = (FaultKind.COORDINATOR_KILL, FaultKind.WORKER_ZOMBIE)


def cell_settings(kind: FaultKind, repetition: int, short: bool = False) -> ChaosSettings:
    """A cell's run; ``short`` (the default suite's): the fault at the low end of its
    durations (a zombie frozen 15 s, past its 6 s session; a node down 10 s) and 20 s after."""
    s = ChaosSettings(seed=SEED + 100 * repetition + list(FaultKind).index(kind),
                      minutes=0, partitions=6, workers=2, rate=60.0, switch_every_s=30.0,
                      plan_lead_ms=15_000, schedule=(kind,), warmup_s=5.0, settle_s=30.0,
                      drain_s=90.0, rss_min_span_s=3600.0)
    if short:
        s = s.model_copy(update={"settle_s": 20.0, "down_s": (10.0, 10.0),
                                 "frozen_s": (15.0, 15.0)})
    return s


def run_fault_cell(cluster: KafkaCluster, kind: FaultKind, repetition: int,
                   tmp: Path, short: bool = False) -> ChaosResult:
    r = chaos_run(cluster, tmp, cell_settings(kind, repetition, short),
                  say=lambda _line: None)
    print(f"\n[{kind.value} #{repetition}] {describe(r)}", flush=True)
    return r


@pytest.mark.broker
@pytest.mark.parametrize("kind", CI_FAULTS, ids=[k.name.lower() for k in CI_FAULTS])
def test_ci_fault_cell(kind: FaultKind, defaults_cluster: KafkaCluster, tmp_path: Path) -> None:
    r = run_fault_cell(defaults_cluster, kind, 0, tmp_path, short=True)
    assert not failures(r), f"{'; '.join(failures(r))}: {describe(r)}"


@pytest.mark.conformance_full
@pytest.mark.broker
def test_every_fault_repeatedly(defaults_cluster: KafkaCluster, tmp_path: Path) -> None:
    """Every fault ``REPEAT`` times, each cell written to docs/conformance.md passing or not;
    then the test fails if any cell did."""
    started = time.monotonic()
    cells: list[FaultCell] = []
    for repetition in range(1, REPEAT + 1):
        for kind in FaultKind:
            r = run_fault_cell(defaults_cluster, kind, repetition,
                               tmp_path / f"{kind.name.lower()}-{repetition}")
            cells.append(FaultCell(kind=kind, repetition=repetition, result=r,
                                   failures=failures(r), summary=describe(r)))
    report.write_faults(cells, f"Apache Kafka {kafka_version()}", SEED, REPEAT,
                        time.monotonic() - started)
    failed = [c for c in cells if c.failures]
    assert not failed, "\n".join(f"{c.kind.value} #{c.repetition}: {'; '.join(c.failures)}"
                                  for c in failed)
