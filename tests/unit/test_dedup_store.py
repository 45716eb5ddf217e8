from __future__ import annotations

from pathlib import Path

import pytest
from rocksdict import Rdict

from router.dedup_store import DedupStore, DedupStoreError
from router.identity import record_identity


def ids(n: int, start: int = 0) -> list[tuple[bytes, int]]:
    return [(record_identity(b"k", str(i).encode(), i), i) for i in range(start, start + n)]


def test_lookups_see_buffered_and_flushed_writes(tmp_path: Path) -> None:
    with DedupStore(tmp_path / "p0") as store:
        (a, ta), (b, _) = ids(2)
        store.add(a, ta)
        assert a in store and b not in store and store.pending == 1
        store.flush()
        assert store.pending == 0 and a in store and b not in store


def test_reopen_keeps_identities_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    store = DedupStore(path)
    for ident, t in ids(1000):
        store.add(ident, t)
    store.put_meta("snapshot", b'{"x": 1}')
    store.close()
    store = DedupStore(path)
    assert all(ident in store for ident, _ in ids(1000))
    assert not any(ident in store for ident, _ in ids(10, start=1000))
    assert store.get_meta("snapshot") == b'{"x": 1}'
    assert len(store) == 1000
    store.close()


def test_purge_forgets_only_identities_below_the_cut(tmp_path: Path) -> None:
    with DedupStore(tmp_path / "p0") as store:
        for ident, t in ids(100, start=-50):  # negative event times order correctly too
            store.add(ident, t)
        assert store.purge(10) == 60
        kept = [t for ident, t in ids(100, start=-50) if ident in store]
        assert kept == list(range(10, 50))
        assert len(store) == 40
        assert store.purge(10) == 0


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
