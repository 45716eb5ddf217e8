"""Canary cells: a per-key canary's rollout under a fault, on Apache Kafka with broker defaults.

A cell is a fault cell (tests/conformance/test_fault_cells.py, a short chaos run of
tests/soak/chaos.py) whose plans are a canary's steps instead of whole switches back and forth:

* **A**: ``green`` takes 5% of the keys, then 25%, then every key, with a router worker killed
  (``kill -9``, restarted at once with its instance id) at a random time during the steps;
* **B**: ``green`` takes 25% of the keys, then the rollback gives them back to ``blue``, with a
  zombie worker (``SIGSTOP`` past its session while the rollback comes, ``SIGCONT`` after its
  partitions moved);
* **C**: A's steps with the leader of a raw or output partition killed (``kill -9``, restarted);
* **D**: B's rollback with a broker frozen for 20 s (``SIGSTOP``, then ``SIGCONT``) while the
  rollback's plan or boundary comes.

The workload writes every seventh event without a key. The checker (tests/soak/checker.py)
decides each record's primary with the router's own pure function of the plan, the key and the
event time (cutover.key_primary), under the boundaries each partition reported, and checks the
ordered handover for the keys that move. A cell passes with every record exactly once from its
key's primary and in order, no partition stuck, every step published, and both versions
forwarding records in every canary step: a cell whose keys all fell on one side of the share
could not fail on the wrong version.

``make conformance`` runs each cell ``CONFORMANCE_CANARY_REPEAT`` times (3 by default), each a
fresh route and seed, and writes the section "Canary cells" of docs/conformance.md, failing
cells included and marked. The default suite runs only the checks without a broker: a cell
takes two to three minutes besides its own cluster's start, over the default suite's budget
for one more test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from cutover.key_bucket import BUCKETS, key_bucket
from testground.kafka_broker import KafkaCluster, kafka_version
from tests.conformance import report
from tests.conformance.fault_cell import CanaryCell, describe, failures
from tests.soak.chaos import ChaosResult, ChaosSettings, chaos_run
from tests.soak.checker import StepCount, Verdict
from tests.soak.cluster_faults import FaultKind
from tests.soak.plans import Step, canary_steps
from tests.soak.workload import Event, event_key

SEED = int(os.environ.get("CONFORMANCE_SEED", "20260101"))
REPEAT = int(os.environ.get("CONFORMANCE_CANARY_REPEAT", "3"))
PARTITIONS = 6
KEYLESS_EVERY = 7   # prime to PARTITIONS: every partition gets records without a key


class CanarySpec(NamedTuple):
    name: str
    steps: tuple[Step, ...]
    fault: FaultKind
    # when the fault starts, seconds after the switches start (a step every SWITCH_EVERY_S)
    fault_at_s: tuple[float, float]


SWITCH_EVERY_S = 30.0
LEAD_MS = 15_000
CELLS = (
    # steps at 30, 60 and 90 s, their boundaries ~15 s of event time later: the kill comes
    # after the first step and before the last boundary
    CanarySpec("A", canary_steps("green:5%", "green:25%", "green"), FaultKind.WORKER_KILL,
               (35.0, 100.0)),
    # the 25% step at 30 s, the rollback at 60 s (boundary ~75 s): the worker is frozen for
    # 20-40 s from 40-60 s, so the rollback's plan or boundary passes while it is frozen
    CanarySpec("B", canary_steps("green:25%", "blue"), FaultKind.WORKER_ZOMBIE, (40.0, 60.0)),
    # A's steps with a broker killed instead: the leader of a raw or output partition
    CanarySpec("C", canary_steps("green:5%", "green:25%", "green"), FaultKind.LEADER_KILL,
               (35.0, 100.0)),
    # B's rollback with a broker frozen for 20 s as the rollback's plan or boundary comes
    CanarySpec("D", canary_steps("green:25%", "blue"), FaultKind.BROKER_FREEZE, (40.0, 60.0)),
)


def cell_settings(spec: CanarySpec, repetition: int) -> ChaosSettings:
    return ChaosSettings(
        seed=SEED + 100 * repetition + 50 + CELLS.index(spec), minutes=0,
        partitions=PARTITIONS, workers=2, rate=60.0, switch_every_s=SWITCH_EVERY_S,
        plan_lead_ms=LEAD_MS, schedule=(spec.fault,), first_fault_s=spec.fault_at_s,
        steps=spec.steps, step_tail_s=15.0, keyless_every=KEYLESS_EVERY, warmup_s=5.0,
        settle_s=10.0, drain_s=90.0, rss_min_span_s=3600.0)


def canary_failures(spec: CanarySpec, r: ChaosResult) -> list[str]:
    """The fault cells' reasons, and the canary's own: every step published, and in each
    canary step both the canary's version and the primary forwarded records."""
    out = failures(r)
    if r.plans != 1 + len(spec.steps):
        out.append(f"{r.plans - 1} of {len(spec.steps)} plan steps published")
    steps = r.verdict.steps[1:]
    for step, form in zip(steps, spec.steps, strict=False):
        if form.canary is None:
            if not step.forwarded.get(form.primary):
                out.append(f"step {step.segment} ({form.describe()}): nothing forwarded")
            continue
        for version in (form.primary, form.canary.version):
            if not step.forwarded.get(version):
                out.append(f"step {step.segment} ({form.describe()}): nothing forwarded from "
                           f"{version}")
    return out


def run_canary_cell(cluster: KafkaCluster, spec: CanarySpec, repetition: int,
                    tmp: Path) -> CanaryCell:
    started = time.monotonic()
    r = chaos_run(cluster, tmp, cell_settings(spec, repetition), say=lambda _line: None)
    cell = CanaryCell(name=spec.name, steps=[s.describe() for s in spec.steps],
                      kind=spec.fault, repetition=repetition, result=r,
                      failures=canary_failures(spec, r), summary=describe(r))
    per_step = "; ".join(f"{s.rule}: {s.forwarded}" for s in r.verdict.steps)
    print(f"\n[canary {spec.name} #{repetition}] {cell.summary}; lost {r.verdict.lost}, dup "
          f"{r.verdict.duplicated}, wrong {r.verdict.wrong_version}, order "
          f"{r.verdict.order_violations}; per step {per_step}; "
          f"{time.monotonic() - started:.0f} s"
          f"{''.join('; FAIL: ' + f for f in cell.failures)}", flush=True)
    return cell


def test_the_workload_s_keys_fall_on_both_sides_of_every_share() -> None:
    """On every partition some records are the canary's at 5%, some move at 25%, some stay
    with the primary, and some have no key: otherwise a cell could not fail on them."""
    per_partition: dict[int, set[str]] = {p: set() for p in range(PARTITIONS)}
    for n in range(PARTITIONS * 997 * KEYLESS_EVERY):
        e = Event(n, n % PARTITIONS, 0, keyed=n % KEYLESS_EVERY != KEYLESS_EVERY - 1)
        key = event_key(e)
        b = None if key is None else key_bucket(key)
        per_partition[e.partition].add(
            "none" if b is None else "5%" if b < BUCKETS // 20 else
            "25%" if b < BUCKETS // 4 else "rest")
    assert all(kinds == {"none", "5%", "25%", "rest"} for kinds in per_partition.values())


@pytest.mark.conformance_full
@pytest.mark.broker
def test_canary_cells_repeatedly(defaults_cluster: KafkaCluster, tmp_path: Path) -> None:
    """Each cell ``REPEAT`` times, each written to docs/conformance.md passing or not; then the
    test fails if any did."""
    started = time.monotonic()
    cells: list[CanaryCell] = []
    for repetition in range(1, REPEAT + 1):
        for spec in CELLS:
            cells.append(run_canary_cell(defaults_cluster, spec, repetition,
                                         tmp_path / f"{spec.name}-{repetition}"))
    report.write_canary(cells, f"Apache Kafka {kafka_version()}", SEED, REPEAT,
                        time.monotonic() - started)
    failed = [c for c in cells if c.failures]
    assert not failed, "\n".join(f"canary {c.name} #{c.repetition}: {'; '.join(c.failures)}"
                                  for c in failed)


def test_the_section_lists_every_cell_with_its_steps_and_marks_a_failing_one(
        tmp_path: Path) -> None:
    doc = tmp_path / "conformance.md"
    doc.write_text("# Conformance grid\n\n<!-- section faults:kafka: written by "
                   "tests/conformance, do not edit -->\n## Fault cells\n\nkept\n")
    spec = CELLS[0]
    verdict = Verdict(expected=10, forwarded=10, steps=[
        StepCount(segment=0, rule="primary 'blue'", forwarded={"blue": 4}),
        StepCount(segment=1, rule="5%", forwarded={"blue": 3, "green": 1}),
        StepCount(segment=2, rule="25%", forwarded={"blue": 1}),
        StepCount(segment=3, rule="green", forwarded={"green": 1})])
    r = ChaosResult(settings=cell_settings(spec, 1), started=0.0, plans=4, verdict=verdict)
    cells = [CanaryCell(name=spec.name, steps=[s.describe() for s in spec.steps],
                        kind=spec.fault, repetition=1, result=r,
                        failures=canary_failures(spec, r), summary=describe(r))]
    report.write_canary(cells, "Apache Kafka 4.1.0", SEED, 1, 60.0, doc)
    text = doc.read_text()
    assert "kept" in text and "## Canary cells on Apache Kafka 4.1.0" in text
    assert "**0/1 cells pass**" in text
    assert ("blue + green 5%: blue 3, green 1; blue + green 25%: blue 1; green whole: green 1"
            in text)
    assert "**FAIL**: 0 faults injected instead of 1; step 2 (blue + green 25%): nothing " \
           "forwarded from green" in text
