"""Dedup store footprint against records seen: identities held, memory and RocksDB disk stay
bounded by the retention window, not by the number of records (``make bench``).

The store is fed as the router feeds it: one identity per forwarded record, a flush per batch,
a purge of everything older than horizon - retention now and then. Event time advances 1 ms
per record, so the window holds RETENTION_MS identities once it has filled; the store keeps
them in time buckets of half the window and drops a bucket once all of it is older, so it
holds up to half a window more. On disk the store
saw-tooths (the write-ahead log grows until a memtable flush, purged keys leave the SST files
at the next compaction), bounded by RocksDB's write buffer and compaction trigger, not by the
records seen.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from cutover.settings import DedupSettings
from router.dedup.store import DedupStore
from router.rule.identity import record_identity
from tests.bench.report import load_line, record

pytestmark = [pytest.mark.bench]

STEP = 500_000
STEPS = 12                   # 0.5M .. 6M records: one whole RocksDB compaction cycle
RETENTION_MS = 600_000       # = 600,000 identities at 1 record per ms of event time
FLUSH_EVERY = 10_000         # a produce batch
PURGE_EVERY = 50_000         # the router purges every 30 s
BASE_T = 1_767_225_600_000


@dataclass(frozen=True)
class Row:
    records: int
    held: int
    filter_mb: float         # the Bloom filters in front of RocksDB (set by settings)
    rss_delta_mb: float      # the process, RocksDB memtable and allocator slack included
    sst_mb: float
    wal_mb: float
    disk_mb: float           # the whole store directory


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


def _files(path: Path, suffix: str) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.suffix == suffix)


def _feed(store: DedupStore, start: int, stop: int) -> None:
    for i in range(start, stop):
        t = BASE_T + i
        store.add(record_identity(b"k%d" % (i % 5000), b'{"n": %d}' % i, t), t)
        if (i + 1) % FLUSH_EVERY == 0:
            store.flush()
        if (i + 1) % PURGE_EVERY == 0:
            store.purge(t - RETENTION_MS)


def test_dedup_store_is_bounded_by_retention(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = DedupStore(path, DedupSettings(retention_ms=RETENTION_MS))
    rss0 = _rss()
    rows: list[Row] = []
    for step in range(1, STEPS + 1):
        _feed(store, (step - 1) * STEP, step * STEP)
        store.flush()
        held = len(store)
        rows.append(Row(step * STEP, held, _mb(store.filter_bytes), _mb(_rss() - rss0),
                        _mb(_files(path, ".sst")), _mb(_files(path, ".log")),
                        _mb(store.disk_bytes())))
    store.close()

    print(f"\ndedup store, retention {RETENTION_MS:,} ms = {RETENTION_MS:,} identities at 1 "
          f"record/ms; {load_line()}")
    print(f"{'records seen':>13} {'held':>9} {'filter MB':>9} {'RSS +MB':>8} {'SST MB':>7} "
          f"{'WAL MB':>7} {'disk MB':>8}")
    for r in rows:
        print(f"{r.records:>13,} {r.held:>9,} {r.filter_mb:>9.1f} {r.rss_delta_mb:>8.1f} "
              f"{r.sst_mb:>7.1f} {r.wal_mb:>7.1f} {r.disk_mb:>8.1f}")
    filled = next(r for r in rows if r.records >= RETENTION_MS)
    after = [r for r in rows if r.records >= filled.records]
    print(f"after the window filled ({filled.records:,} records): held "
          f"{min(r.held for r in after):,}..{max(r.held for r in after):,}, disk "
          f"{min(r.disk_mb for r in after)}..{max(r.disk_mb for r in after)} MB, RSS delta "
          f"{min(r.rss_delta_mb for r in after)}..{max(r.rss_delta_mb for r in after)} MB")
    record("dedup_store", {"retention_ms": RETENTION_MS, "rows": [asdict(r) for r in rows]})

    last = rows[-1]
    for r in after:  # held: the window, half a window of bucket slack, one purge interval
        assert RETENTION_MS <= r.held <= RETENTION_MS * 3 // 2 + PURGE_EVERY
    assert last.filter_mb <= filled.filter_mb
    assert last.disk_mb <= 2 * filled.disk_mb
    assert last.rss_delta_mb <= 2 * filled.rss_delta_mb
