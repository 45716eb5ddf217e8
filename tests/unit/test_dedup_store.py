from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from cutover.settings import DedupSettings, StoreMemorySettings
from router.dedup.bloom import IDENTITIES_PER_WORD, MAX_LIVE_BUCKETS, MIN_WORDS, mark
from router.dedup.memory import StoreMemory
from router.dedup.store import DedupStore, DedupStoreError
from router.rule.identity import record_identity

REPO = Path(__file__).resolve().parents[2]


def ids(n: int, start: int = 0) -> list[tuple[bytes, int]]:
    return [(record_identity(b"k", str(i).encode(), i), i) for i in range(start, start + n)]


def fill_one_after_another(stores: list[DedupStore], added: list[tuple[bytes, int]],
                           batch: int) -> None:
    """Each store in turn gets every identity of ``added``, flushed ``batch`` at a time (a
    partition's batches), then goes quiet."""
    for store in stores:
        for k in range(0, len(added), batch):
            for ident, t in added[k:k + batch]:
                store.add(ident, t)
            store.flush()


def test_lookups_see_buffered_and_flushed_writes(tmp_path: Path) -> None:
    with DedupStore(tmp_path / "p0") as store:
        (a, ta), (b, _) = ids(2)
        store.add(a, ta)
        assert a in store and b not in store and store.pending == 1
        store.flush()
        assert store.pending == 0 and a in store and b not in store


def test_reopen_keeps_flushed_identities_and_metadata_from_saved_filters(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    store = DedupStore(path)
    for ident, t in ids(1000):
        store.add(ident, t)
    store.put_meta("snapshot", b'{"x": 1}')
    store.flush()
    store.close()
    store = DedupStore(path)
    assert not store.filters_rebuilt  # a clean close saved them
    assert all(ident in store for ident, _ in ids(1000))
    assert not any(ident in store for ident, _ in ids(10, start=1000))
    assert store.get_meta("snapshot") == b'{"x": 1}'
    assert len(store) == 1000
    store.close()


def test_write_now_writes_those_identities_and_leaves_the_buffer(tmp_path: Path) -> None:
    """Records already in the output log (another writer's) are written at once; the open
    batch's buffered identities and metadata stay buffered, and a close still drops them."""
    path = tmp_path / "p0"
    store = DedupStore(path)
    (a, ta), (b, tb), (c, tc) = ids(3)
    store.add(a, ta)
    store.put_meta("seq", b"7")
    store.write_now({b: tb, c: tc})
    assert store.pending == 1 and all(x in store for x in (a, b, c))
    store.close()
    with DedupStore(path) as store:
        assert b in store and c in store and a not in store
        assert store.get_meta("seq") is None


def test_close_forgets_what_was_not_flushed(tmp_path: Path) -> None:
    """The router flushes after delivery: an identity added for a record whose output never
    left must not survive a stop, or the record's replay would be taken for a duplicate."""
    path = tmp_path / "p0"
    store = DedupStore(path)
    (a, ta), (b, tb) = ids(2)
    store.add(a, ta)
    store.flush()
    store.add(b, tb)
    store.put_meta("seq", b"2")
    store.close()
    with DedupStore(path) as store:
        assert a in store and b not in store and store.get_meta("seq") is None


CRASH = """
import os, sys
from router.dedup.store import DedupStore
from router.rule.identity import record_identity
store = DedupStore(sys.argv[1])
for i in range(int(sys.argv[2])):
    store.add(record_identity(b"k", str(i).encode(), i), i)
store.flush()
os._exit(9)  # no close: the filters are never saved
"""


def test_after_a_crash_the_filters_are_rebuilt_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    with DedupStore(path) as store:  # a clean close first: its saved filters must not be used
        store.add(*ids(1, start=5000)[0])
        store.flush()
    done = subprocess.run([sys.executable, "-c", CRASH, str(path), "3000"], cwd=REPO,
                          check=False)
    assert done.returncode == 9
    with DedupStore(path) as store:
        assert store.filters_rebuilt
        assert all(ident in store for ident, _ in ids(3000))
        assert ids(1, start=5000)[0][0] in store
        assert not any(ident in store for ident, _ in ids(100, start=6000))
        assert len(store) == 3001


def test_purge_forgets_whole_buckets_below_the_cut(tmp_path: Path) -> None:
    settings = DedupSettings(retention_ms=100)  # buckets of 50 ms of event time
    with DedupStore(tmp_path / "p0", settings) as store:
        for ident, t in ids(100, start=-50):  # negative event times order correctly too
            store.add(ident, t)
        store.flush()
        assert len(store) == 100
        assert store.purge(10) == 50  # [-50, 0) ends below 10; [0, 50) does not
        kept = [t for ident, t in ids(100, start=-50) if ident in store]
        assert kept == list(range(0, 50))
        assert len(store) == 50
        assert store.purge(10) == 0
        assert store.purge(50) == 50
        assert not any(ident in store for ident, _ in ids(100, start=-50))


def test_a_purge_writes_no_identity_of_the_open_batch(tmp_path: Path) -> None:
    """The worker purges every store now and then, one whose batch's commit is still in flight
    included. That batch's identities stay buffered through a purge: if it aborts, the store
    is closed without them, and the replay of its records finds none of them."""
    path = tmp_path / "p0"
    settings = DedupSettings(retention_ms=100)
    with DedupStore(path, settings) as store:
        committed, in_flight = ids(50), ids(50, start=50)
        for ident, t in committed:
            store.add(ident, t)
        store.flush()                       # the last committed batch's
        for ident, t in in_flight:
            store.add(ident, t)
        store.purge(-1000)                  # nothing old enough to forget
        assert all(ident in store for ident, _ in in_flight)   # still known while open
    with DedupStore(path, settings) as store:   # the batch aborted: closed without a flush
        assert all(ident in store for ident, _ in committed)
        assert not any(ident in store for ident, _ in in_flight)


def test_purged_buckets_stay_gone_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    with DedupStore(path, DedupSettings(retention_ms=100)) as store:
        for ident, t in ids(100):
            store.add(ident, t)
        store.flush()
        store.purge(50)
    with DedupStore(path, DedupSettings(retention_ms=100)) as store:
        assert [t for ident, t in ids(100) if ident in store] == list(range(50, 100))


def test_a_false_positive_costs_a_read_never_a_loss(tmp_path: Path) -> None:
    """A one-word filter per bucket is full after a few identities: every new identity then
    passes the filter, and RocksDB must answer that it is not there."""
    with DedupStore(tmp_path / "p0", DedupSettings(filter_bytes=32)) as store:
        for ident, t in ids(200):
            store.add(ident, t)
        store.flush()
        fresh = ids(500, start=1000)
        assert not any(ident in store for ident, _ in fresh)
        assert store.false_positives == store.disk_reads > 400
        assert all(ident in store for ident, _ in ids(200))


def test_a_forced_false_positive_with_a_batch_not_yet_written(tmp_path: Path) -> None:
    """The bits of an identity set by hand (a false positive for certain), while another
    identity waits in the batch not yet written."""
    with DedupStore(tmp_path / "p0") as store:
        (a, ta), (b, _), (c, tc) = ids(3)
        store.add(a, ta)
        store.flush()
        store.add(c, tc)
        mark(store._buckets[ta - ta % store._span].words, b)
        assert b not in store and store.false_positives == 1 and store.disk_reads == 1
        assert a in store and c in store and store.disk_reads == 2


def test_live_buckets_and_memory_stay_bounded_when_event_time_races(tmp_path: Path) -> None:
    """A backlog read fast moves event time far faster than the router purges: buckets older
    than the window are dropped as newer ones open, so the filter memory stays put."""
    settings = DedupSettings(retention_ms=1_000, filter_bytes=4096)
    with DedupStore(tmp_path / "p0", settings) as store:
        for ident, t in ids(50_000):
            store.add(ident, t)
            if t % 1000 == 0:
                store.flush()
                assert len(store._buckets) <= MAX_LIVE_BUCKETS
                assert store.filter_bytes <= settings.filter_bytes
        store.flush()
        recent = [ident for ident, t in ids(50_000) if t >= 49_000 - 1_000]
        assert all(ident in store for ident in recent)
        assert len(store) <= 2_000 + 500  # the window plus at most one bucket's slack


def test_a_store_of_an_earlier_format_is_started_afresh(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    db = Rdict(str(path), Options(raw_mode=True))
    db.put(b"mformat", b"cutover-dedup-store/1")
    db.put(b"mseq", b"7")
    db.put(b"t" + bytes(8) + b"x" * 16, b"")
    db.close()
    with DedupStore(path) as store:
        assert store.get_meta("seq") is None and len(store) == 0


def test_foreign_directory_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "p0"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    with pytest.raises(DedupStoreError, match="not a cutover dedup store"):
        DedupStore(d)


def test_foreign_rocksdb_is_refused(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "other"))
    db["x"] = 1
    db.close()
    with pytest.raises(DedupStoreError, match="that cutover did not write"):
        DedupStore(tmp_path / "other")


def test_damaged_store_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    DedupStore(path).close()
    (path / "CURRENT").write_text("MANIFEST-999999\n")
    with pytest.raises(DedupStoreError, match="remove the directory"):
        DedupStore(path)


def test_store_in_use_is_refused(tmp_path: Path) -> None:
    first = DedupStore(tmp_path / "p0")
    try:
        with pytest.raises(DedupStoreError, match="cannot open dedup store"):
            DedupStore(tmp_path / "p0")
    finally:
        first.close()


def test_destroy_removes_the_directory(tmp_path: Path) -> None:
    store = DedupStore(tmp_path / "p0")
    store.add(b"x" * 16, 1)
    store.destroy()
    assert not (tmp_path / "p0").exists()
    fresh = DedupStore(tmp_path / "p0")
    assert b"x" * 16 not in fresh
    fresh.close()


def test_a_quiet_partition_holds_a_small_filter_and_a_busy_one_grows_its_own(
        tmp_path: Path) -> None:
    """Filters are sized for the identities a partition sees: a store with a few identities
    keeps the smallest bucket; one that fills its bucket past 8 identities a word has it
    rebuilt larger from its keys, and every identity added is still found."""
    memory = StoreMemory()
    quiet = DedupStore(tmp_path / "quiet", memory=memory)
    busy = DedupStore(tmp_path / "busy", memory=memory)
    for ident, t in ids(100):
        quiet.add(ident, t)
    quiet.flush()
    added = ids(50_000)
    for k in range(0, len(added), 5_000):
        for ident, t in added[k:k + 5_000]:
            busy.add(ident, t)
        busy.flush()
    assert quiet.filter_bytes == 8 * MIN_WORDS
    assert busy.filter_bytes >= 50_000 * 8 // IDENTITIES_PER_WORD
    assert all(ident in busy for ident, _ in added)
    assert busy.false_positives < 500   # the filter keeps new identities from RocksDB
    probe = ids(5_000, start=100_000)
    assert not any(ident in busy for ident, _ in probe)
    assert memory.filter_bytes_used == quiet.filter_bytes + busy.filter_bytes
    quiet.close()
    busy.close()
    assert memory.filter_bytes_used == 0


def test_the_filters_of_a_worker_stay_within_its_budget_and_lose_nothing(
        tmp_path: Path) -> None:
    """Eight stores share a budget far too small for their identities: each bucket gets what
    is left (never below the floor), the refusals are counted, and every identity added is
    found (a fuller filter costs RocksDB reads, not records)."""
    memory = StoreMemory(StoreMemorySettings(filter_bytes=1 << 20))
    stores = [DedupStore(tmp_path / f"p{i}", memory=memory) for i in range(8)]
    added = ids(40_000)
    fill_one_after_another(stores, added, batch=4_000)
    floor = 8 * MIN_WORDS * MAX_LIVE_BUCKETS * len(stores)
    assert memory.filter_bytes_used <= (1 << 20) + floor
    assert memory.filters.refused > 0
    assert all(ident in store for store in stores for ident, _ in added[::97])
    for store in stores:
        store.destroy()
    assert memory.filter_bytes_used == 0


def test_grown_filters_are_saved_at_close_and_read_back_without_a_scan(
        tmp_path: Path) -> None:
    path = tmp_path / "p0"
    added = ids(30_000)
    with DedupStore(path) as store:
        for ident, t in added:
            store.add(ident, t)
        store.flush()
        size = store.filter_bytes
    assert size > 8 * MIN_WORDS
    with DedupStore(path) as store:
        assert not store.filters_rebuilt and store.filter_bytes == size
        assert all(ident in store for ident, _ in added[::7])


def test_the_shared_memtables_and_block_cache_are_shown_and_stay_within_their_settings(
        tmp_path: Path) -> None:
    """Stores written one after the other, each going quiet with its memtable full: the
    worker flushes the quiet stores' memtables (RocksDB would flush only the store being
    written, and stall its writes for good), so the busy store's writes go on and the
    memtables together stay within store_memory.write_buffer_bytes. Reads fill the block
    cache no further than its size; both are in the worker's metrics."""
    mib = 1 << 20
    memory = StoreMemory(StoreMemorySettings(write_buffer_bytes=2 * mib, block_cache_bytes=mib))
    stores = [DedupStore(tmp_path / f"p{i}", memory=memory) for i in range(4)]
    added = ids(20_000)
    fill_one_after_another(stores, added, batch=2_000)
    assert memory.memtable_flushes > 0
    assert 0 < memory.write_buffers.get_usage() <= 2 * mib + mib  # flushes in flight at most
    assert all(ident in store for store in stores for ident, _ in added[::50])
    assert memory.block_cache.get_usage() <= mib
    shown = dict(line.split() for line in memory.prometheus().splitlines()
                 if line.startswith("cutover_store_"))
    assert int(shown["cutover_store_write_buffer_bytes"]) == memory.write_buffers.get_usage()
    assert int(shown["cutover_store_block_cache_bytes"]) == memory.block_cache.get_usage()
    for store in stores:
        store.close()


def test_many_quiet_stores_of_a_worker_are_not_flushed_for_holding_nothing(
        tmp_path: Path) -> None:
    """A worker of a few hundred partitions writes a few identities to each store per batch.
    Their empty memtables alone stay far below the worker's write-buffer budget, so no write
    flushes a memtable: RocksDB's default arena block (1 MiB per memtable) passed the budget at
    a few dozen stores, and every write flushed memtables holding next to nothing."""
    memory = StoreMemory()
    stores = [DedupStore(tmp_path / f"p{i}", memory=memory) for i in range(256)]
    added = ids(256 * 20 * 3)
    for batch in range(3):
        for i, store in enumerate(stores):
            start = (batch * 256 + i) * 20
            for ident, t in added[start:start + 20]:
                store.add(ident, t)
            store.flush()
    assert memory.memtable_flushes == 0
    assert memory.write_buffers.get_usage() < memory.settings.write_buffer_bytes // 2
    assert all(ident in stores[7] for ident, _ in added[7 * 20:8 * 20])
    for store in stores:
        store.close()
