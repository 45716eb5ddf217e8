"""Micro-benchmark of the decision core: decisions per second over 1M synthetic records with
the RocksDB dedup store, printed (not asserted). Run: make bench."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cutover.headers import (
    RecordKind,
    TaggedRecord,
    data_envelope,
    heartbeat_headers,
    parse_headers,
)
from cutover.plan import CutoverPlan
from router.dedup.store import DedupStore
from router.rule.decision import Incoming, Outcome, PartitionRouter
from router.rule.identity import identity_function
from tests.bench.report import load_line, record

N = 1_000_000
FLUSH_EVERY = 10_000  # the router flushes the store once per produce batch


def synthetic(n: int) -> list[tuple[list, bytes, bytes]]:
    """Both versions, ~10% replays, event times rising, a switch in the middle."""
    out = []
    for i in range(n):
        version = "blue" if i % 2 else "green"
        j = i - 22 if i % 10 == 0 and i > 22 else i  # a replay of a recent, original record
        t = 1_700_000_000_000 + j * 3
        headers = TaggedRecord(version=version, event_time=t, watermark=t - 5_000,
                               batch=j // 1000).to_headers()
        value = b'{"n": %d, "v": "%s"}' % (j, version.encode())
        out.append((headers, b"key-%d" % (j % 5000), value))
        if i % 1000 == 999:  # the end of a micro-batch: each version's heartbeat
            for v in ("blue", "green"):
                out.append((heartbeat_headers(v, t - 5_000, j // 1000), None, None))
    return out


def run(records, tmp: Path, *, parse: bool, fast: bool = False
        ) -> tuple[float, dict[Outcome, int]]:
    """``parse``: include header parsing; ``fast``: the router's per-record path (the data
    header recognizer, then ``suppresses``/``decide``; anything else through ``observe``)."""
    store = DedupStore(tmp)
    router = PartitionRouter(0, identity=identity_function("record"), store=store,
                             retention_ms=3_600_000, ordered=True)
    router.apply_plan(CutoverPlan(route="b", epoch=1, segments=[
        {"from_event_time": None, "primary": "blue"},
        {"from_event_time": 1_700_000_000_000 + N * 3 // 2, "primary": "green"}]))
    counts: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
    pre = [(parse_headers(h), k, v) for h, k, v in records] if not parse else None
    start = time.perf_counter()
    for i, (h, k, v) in enumerate(records):
        if fast:
            tag = data_envelope(h)
            if tag is not None:
                if router.suppresses(*tag):
                    counts[Outcome.SUPPRESS] += 1
                else:
                    counts[router.decide(Incoming(tag[0], tag[1], None, k, v)).outcome] += 1
                if i % FLUSH_EVERY == 0:
                    store.flush()
                continue
        env = parse_headers(h) if parse else pre[i][0]
        inc = Incoming(env.version, env.event_time, env.watermark, k, v,
                       heartbeat=env.kind is RecordKind.HEARTBEAT)
        for d in router.observe(inc):
            counts[d.outcome] += 1
        if i % FLUSH_EVERY == 0:
            store.flush()
    store.flush()
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, counts


@pytest.mark.bench
def test_core_decisions_per_second(tmp_path: Path) -> None:
    records = synthetic(N)
    t_core, counts = run(records, tmp_path / "a", parse=False)
    t_full, _ = run(records, tmp_path / "b", parse=True)
    t_fast, fast_counts = run(records, tmp_path / "c", parse=True, fast=True)
    assert fast_counts == counts  # the router's path decides exactly as the general one
    print(f"\ncore decisions/s (rule + identity + RocksDB store): {N / t_core:,.0f}"
          f"\nwith bg.* header parsing:                          {N / t_full:,.0f}"
          f"\nheader parsing share of the per-record cost:        {1 - t_core / t_full:.0%}"
          f"\nthe router's per-record path, headers included:     {N / t_fast:,.0f}"
          f" ({t_full / t_fast:.2f}x the general path)"
          f"\noutcomes: {', '.join(f'{o.value}={n:,}' for o, n in counts.items())}"
          f"\n{load_line()}")
    record("core_decisions", {"records": N, "decisions_per_s": round(N / t_core),
                              "with_header_parsing_per_s": round(N / t_full),
                              "router_path_per_s": round(N / t_fast)})
    assert sum(counts.values()) >= N  # every record got a decision (held ones on release)
