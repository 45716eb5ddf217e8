"""The conformance grid: zero loss and zero duplicates, cell by cell, against a reference.

The CI subset runs in the default suite (one parametrized case per cell); ``make conformance``
runs the whole covering design, prints one line per cell and writes docs/conformance.md.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cutover.headers import EVENT_TIME, SRC, VERSION
from testground.brokers import EXTERNAL_BOOTSTRAP_ENV, BrokerUnderTest, broker_for_tests
from tests.conformance import report
from tests.conformance.data import LATENESS, EmulatedJob, generate
from tests.conformance.runner import CellResult, OutRecord, run_cell, verify
from tests.conformance.scenario import DIMENSIONS, Scenario, ci_subset, full_grid, is_covering

SEED = int(os.environ.get("CONFORMANCE_SEED", "20260101"))
GRID = full_grid(SEED)
CI = ci_subset(GRID)


def test_grid_is_an_all_pairs_covering_design() -> None:
    assert is_covering(GRID)
    assert not is_covering(GRID[:-1]), "the greedy design should have no spare cell at the end"
    assert full_grid(SEED) == GRID  # deterministic
    for d, values in DIMENSIONS.items():
        assert {getattr(s, d) for s in CI} == set(values), f"CI misses a value of {d}"


@pytest.mark.parametrize("cell", [s for s in GRID if s.sources == 2][:1] + GRID[:1],
                         ids=lambda s: s.id)
def test_input_is_deterministic_and_watermarks_honest(cell: Scenario) -> None:
    """The reference is only right if the jobs' watermarks are honest: no record of a later
    batch below the watermark announced after an earlier one."""
    batches = generate(cell)
    assert batches == generate(cell)
    seen: set[tuple[bytes, int]] = set()
    top: dict[str, int] = {}
    for i, batch in enumerate(batches):
        for e in batch:
            assert (e.key, e.t) not in seen  # key_event_time identity is a true identity
            seen.add((e.key, e.t))
            top[e.source] = max(top.get(e.source, e.t), e.t)
        if len(top) == cell.sources:
            wm = min(top.values()) - LATENESS
            assert all(e.t >= wm for later in batches[i + 1:] for e in later)


@pytest.mark.parametrize("shape", ["stateless", "windowed"])
def test_emulated_job_shapes_write_what_spark_writes(shape: str) -> None:
    """Data below every watermark a heartbeat announced never follows that heartbeat; a
    windowed job's records all sit below the watermark they carry (a stateless job's at or
    above it); every event is written once, the windowed job's once its watermark closes it."""
    cell = next(s for s in GRID if s.sources == 2)
    job = EmulatedJob("127.0.0.1:1", "raw", "blue", generate(cell), cell.sources, shape)
    sent: list = []
    job._send = sent.extend  # type: ignore[method-assign]  # the broker is not the subject
    for _ in range(len(job.batches)):
        job.run_batch()
    announced = None
    data = []
    for r in sent:
        h = dict(r.headers)
        if h.get("bg.kind") == b"heartbeat":
            if "bg.watermark" in h:  # none before every source has been seen
                announced = int(h["bg.watermark"])
            continue
        t, wm = int(h["bg.event_time"]), h.get("bg.watermark")
        assert announced is None or t >= announced, "a record below an announced watermark"
        if wm is not None:
            assert (t < int(wm)) if shape == "windowed" else (t >= int(wm))
        data.append((r.key, t))
    assert len(data) == len(set(data)) == len(job.emitted)
    every = {(e.key, e.t) for b in job.batches for e in b}
    closed = {kt for kt in every if shape == "stateless" or kt[1] < announced}
    assert set(data) == closed
    assert shape == "stateless" or len(closed) < len(every)  # some stay open at the end


def _check(r: CellResult) -> None:
    assert r.expected > 0
    assert r.passed, "; ".join(r.reasons) + "\n" + report.progress_line(1, 1, r)


@pytest.mark.broker
@pytest.mark.parametrize("cell", CI, ids=[s.id for s in CI])
def test_ci_cell(cell: Scenario, broker: BrokerUnderTest, tmp_path: Path) -> None:
    r = run_cell(cell, broker, tmp_path)
    if r.not_applicable is not None:
        pytest.skip(r.not_applicable)
    if r.residual is not None:
        pytest.xfail(f"known residual on {broker.kind}: {'; '.join(r.reasons)}: {r.residual}")
    _check(r)


def _run_grid(broker: BrokerUnderTest, tmp_path: Path) -> None:
    """Every cell runs and is written to the document, passing or not; then the test fails if
    any cell did (a cell that cannot run on this broker is marked in the table, not hidden)."""
    started = time.monotonic()
    results: list[CellResult] = []
    print(f"\nconformance grid: {len(GRID)} cells, seed {SEED}, on {broker.describe()}",
          flush=True)
    for i, cell in enumerate(GRID, 1):
        r = run_cell(cell, broker, tmp_path / f"cell{i}")
        results.append(r)
        print(report.progress_line(i, len(GRID), r), flush=True)
    report.write(results, broker, SEED, time.monotonic() - started, {s.id for s in CI})
    print(f"wrote {report.DOC}", flush=True)
    failed = [r for r in results
              if not r.passed and r.not_applicable is None and r.residual is None]
    assert not failed, "\n".join(report.progress_line(0, 0, r) for r in failed)


@pytest.mark.conformance_full
@pytest.mark.broker
def test_full_grid_on_apache_kafka(kafka_cluster: BrokerUnderTest, tmp_path: Path) -> None:
    _run_grid(kafka_cluster, tmp_path)


@pytest.mark.conformance_full
@pytest.mark.broker
def test_full_grid_on_tansu(tmp_path: Path) -> None:
    if os.environ.get(EXTERNAL_BOOTSTRAP_ENV):
        pytest.skip(f"{EXTERNAL_BOOTSTRAP_ENV} is set: the grid ran on that Kafka")
    with broker_for_tests(kind="tansu") as broker:
        _run_grid(broker, tmp_path)


def _fake_out(ref: dict[tuple[int, bytes, int], tuple[str, bytes]]) -> list[OutRecord]:
    return [OutRecord(p, k, value, {EVENT_TIME: str(t).encode(), VERSION: version.encode(),
                                    SRC: f"raw:{p}:{i}".encode()})
            for i, ((p, k, t), (version, value)) in enumerate(sorted(ref.items()))]


def test_verifier_catches_every_kind_of_failure() -> None:
    """The grid can fail: loss, duplicates, a wrong version and order violations are each
    counted and each is a reason (a verifier that always passes would prove nothing)."""
    cell = GRID[0]
    ref = {(0, f"k{i}".encode(), 1000 + i): ("blue" if i < 5 else "green", b"v%d" % i)
           for i in range(10)}
    good = CellResult(cell=cell, pins={0: 1005}, clear_s=1.0)
    verify(good, ref, _fake_out(ref), 0, "raw")
    assert good.passed and good.forwarded == good.expected == 10
    out = _fake_out(ref)
    wrong = out[7]._replace(headers={**out[7].headers, VERSION: b"blue"})
    bad_out = [*out[:2], out[6], *out[3:7], wrong, out[8], out[8]]  # 6, 8 twice; 2, 9 lost
    bad = CellResult(cell=cell, pins={0: 1005}, clear_s=1.0)
    verify(bad, ref, bad_out, 1, "raw")
    assert (bad.lost, bad.duplicated, bad.wrong_version, bad.dead_lettered) == (3, 2, 1, 1)
    assert bad.order_violations == 2 and not bad.passed  # t=1003, 1004 after t=1006
    assert len(bad.reasons) == 5
