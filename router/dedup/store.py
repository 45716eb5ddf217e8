"""The dedup store: identities forwarded from one raw partition, in RocksDB (rocksdict).

One directory per (route, partition), so that a partition moving to another worker moves as a
unit. The store is a cache that may be lost: the output log is the record of truth and can
refill it. Writes are buffered and written as one batch on :meth:`flush`; :meth:`close` keeps
only what was flushed (the router flushes after the batch's output is delivered, so the
identity of a record whose output never left must not be remembered).

Memory is set by settings, not by the identities in retention: RocksDB answers lookups, with
the block cache and write buffers a worker's stores share (router.dedup.memory), and in front
of it the time-bucketed Bloom filters of ``router.dedup.bloom``, sized for the identities the
partition sees, tell most new identities apart without a read (docs/performance.md, "Dedup
store at scale").

Layout (raw byte keys; a bucket's prefix is its start, 8 bytes, biased to sort negatives):
  ``t`` + bucket start + identity -> ``b""``   (the purge drops a bucket with one range delete)
  ``b`` + bucket start            -> bucket end
  ``m`` + name                    -> metadata (format marker, filter manifest, caller's meta)

A clean close writes the filter bits to ``cutover-filters.bin`` beside RocksDB's files (a
plain file: as RocksDB values they went through the memtable and an SST at every close) and
then their manifest, ``mfilters``. Opening reads them back; the manifest is deleted on
open, so a crash afterwards cannot leave stale filters trusted. After a crash, one scan of the
keys rebuilds them, holding no identity in memory.

A bucket whose span ends more than retention plus one span below the newest event time added
is dropped when a newer bucket opens, so the live buckets stay at most four even between the
router's purges (event time can race ahead when a backlog is read). The extra span keeps what
the router may still look up: it never checks an identity older than its horizon minus the
retention, and its horizon is at least the newest event time it added.
"""

from __future__ import annotations

import json
import shutil
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np
from rocksdict import BlockBasedOptions, Options, Rdict, ReadOptions, WriteBatch

from cutover.settings import DedupSettings
from router.dedup.bloom import (
    IDENTITIES_PER_WORD,
    MASK_SHIFT,
    MASKS,
    Bucket,
    ceil_pow2,
    mark,
    new_words,
    span_of,
    words_for,
)
from router.dedup.memory import ARENA_BLOCK_BYTES, StoreMemory
from router.rule.identity import IDENTITY_BYTES

FORMAT_MARKER = b"cutover-dedup-store/2"
_EARLIER_FORMATS = (b"cutover-dedup-store/1",)
_MARKER_KEY = b"mformat"
_FILTERS_KEY = b"mfilters"
FILTERS_FILE = "cutover-filters.bin"
_BIAS = 1 << 63
_KEY_BYTES = 9 + IDENTITY_BYTES
_REBUILD_CHUNK = 1 << 16  # keys marked per numpy call when filters are rebuilt
_from_bytes = int.from_bytes


class DedupStoreError(RuntimeError):
    """The store directory cannot be used; the message says what to do."""


def _t(event_time: int) -> bytes:
    return (event_time + _BIAS).to_bytes(8, "big")


def _untime(raw: bytes) -> int:
    return int.from_bytes(raw, "big") - _BIAS


def _keys(prefix: bytes, rows: np.ndarray) -> list[bytes]:
    """The RocksDB keys of identities ``rows`` (one per row) in the bucket of ``prefix``, in
    the order of their first 8 bytes: RocksDB's memtable takes keys in order faster, and a
    row's first 8 bytes all but always tell it apart (the order only speeds the write). Built
    by numpy, for the whole batch: the per-identity Python loop is the cost it saves."""
    order = np.argsort(rows[:, :8].copy().view(">u8").ravel())
    keys = np.empty((len(rows), len(prefix) + rows.shape[1]), dtype=np.uint8)
    keys[:, :len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    keys[:, len(prefix):] = rows[order]
    return cast(list[bytes], keys.view(f"V{keys.shape[1]}").ravel().tolist())


def _options(settings: DedupSettings, memory: StoreMemory) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(settings.write_buffer_bytes)
    opts.set_max_write_buffer_number(2)
    opts.set_arena_block_size(ARENA_BLOCK_BYTES)   # router.dedup.memory says why
    opts.set_max_background_jobs(2)
    opts.set_write_buffer_manager(memory.write_buffers)
    table = BlockBasedOptions()
    table.set_block_cache(memory.block_cache)
    # No RocksDB Bloom filter: the front filter already keeps new identities from reading,
    # and a whole-file filter block (1.2 MB per million keys) evicted from a small cache is
    # read back for every lookup that gets through, several times the cost of the lookup.
    # Index blocks live in the block cache, so they are bounded by it too.
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts.set_block_based_table_factory(table)
    return opts


class DedupStore:
    def __init__(self, path: str | Path, settings: DedupSettings | None = None,
                 memory: StoreMemory | None = None) -> None:
        """``memory``: what the worker's stores share (router.dedup.memory); a store of its
        own when None (tools and tests)."""
        self.path = Path(path)
        self.settings = settings = settings or DedupSettings()
        self.memory = memory or StoreMemory()
        self._span = span_of(settings.retention_ms)
        self._retention = settings.retention_ms
        self._buckets: dict[int, Bucket] = {}
        self.live_bits: list[array[int]] = []        # live buckets' bits, newest first: the lookups
        self._max_t: int | None = None      # newest bucket start seen (a lower bound)
        # Identities added since the last flush -> event time: looked up here; their filter
        # bits and keys are set at the flush, for the whole batch at once.
        self.unflushed: dict[bytes, int] = {}
        self._pending_meta: dict[bytes, bytes] = {}
        self._opened: list[Bucket] = []     # buckets to register at the next flush
        self._dropped: list[Bucket] = []    # buckets to delete at the next flush
        self.disk_reads = 0                 # lookups the filter passed on to RocksDB
        self.false_positives = 0            # ... that RocksDB answered "not there"
        self.filters_rebuilt = False        # this open scanned the keys (no clean close)
        self._db = self._open()
        self._load_buckets()
        self.memory.register(self)

    # -- opening --------------------------------------------------------------------------

    def _open(self) -> Rdict:
        fresh = not self.path.exists() or not any(self.path.iterdir())
        if not fresh and not (self.path / "CURRENT").exists():
            raise DedupStoreError(
                f"{self.path} is not a cutover dedup store (no RocksDB files); point state_dir "
                "elsewhere or remove the directory")
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            db = Rdict(str(self.path), _options(self.settings, self.memory))
        except Exception as exc:  # rocksdict raises plain Exception on corruption/locks
            raise DedupStoreError(
                f"cannot open dedup store {self.path}: {exc}. If it is damaged, remove the "
                "directory: the router rebuilds it from the output topic") from None
        marker = db.get(_MARKER_KEY)
        if marker is None:
            if not fresh and self._has_keys(db):
                db.close()
                raise DedupStoreError(
                    f"{self.path} is a RocksDB directory that cutover did not write; point "
                    "state_dir elsewhere or remove the directory")
            db.put(_MARKER_KEY, FORMAT_MARKER)
        elif marker in _EARLIER_FORMATS:
            # An earlier layout of this cache: start empty (its checkpoint sequence goes with
            # it, so the router refills the store from the output topic).
            db.close()
            shutil.rmtree(self.path)
            return self._open()
        elif marker != FORMAT_MARKER:
            db.close()
            raise DedupStoreError(
                f"{self.path} holds format {marker!r}, this router reads {FORMAT_MARKER!r}; "
                "remove the directory to rebuild it from the output topic")
        return db

    @staticmethod
    def _has_keys(db: Rdict) -> bool:
        it = db.iter()
        it.seek_to_first()
        return it.valid()

    def _load_buckets(self) -> None:
        for raw_key, raw_end in self._db.items(from_key=b"b"):
            key, end = cast(bytes, raw_key), cast(bytes, raw_end)  # a bytes-keyed store
            if key[:1] != b"b":
                break
            start = _untime(key[1:])
            self._buckets[start] = Bucket(start, _untime(end), array("Q"),
                                          key_prefix=b"t" + key[1:])
        manifest = self._db.get(_FILTERS_KEY)
        saved = json.loads(manifest) if manifest is not None else None
        if saved is not None:
            self._db.delete(_FILTERS_KEY)  # trusted once: a crash from here on rebuilds
        starts = sorted(self._buckets)
        file = self.path / FILTERS_FILE
        sizes = saved.get("sizes") if saved is not None else None
        if (saved is not None and isinstance(sizes, list) and saved["starts"] == starts
                and len(sizes) == len(starts) and file.is_file()
                and all(n == ceil_pow2(n) for n in sizes)
                and file.stat().st_size == 8 * sum(sizes)):
            with file.open("rb") as f:
                for start, count, n in zip(starts, saved["counts"], sizes, strict=True):
                    b = self._buckets[start]
                    self.memory.filters.take(n)  # the saved filter's size, as it was
                    b.words.fromfile(f, n)
                    if sys.byteorder == "big":
                        b.words.byteswap()
                    b.count = count
        else:
            self._rebuild_filters()
        if self._buckets:
            self._max_t = max(self._buckets)
        self._relive()

    def _rebuild_filters(self) -> None:
        """Set every bucket's bits from its keys on disk: one pass, in chunks, holding no more
        than a chunk of keys (the registry and the keys are written in one batch, so every
        key belongs to a registered bucket)."""
        self.filters_rebuilt = True
        for b in self._buckets.values():
            self._refill(b, self.memory.filters.grant(
                words_for(self._count_keys(b), self.settings.filter_bytes)))

    def _bucket_keys(self, b: Bucket) -> Iterator[bytes]:
        bound = ReadOptions()
        bound.set_iterate_upper_bound(b"t" + _t(b.start + 1))
        for key in self._db.keys(from_key=b.key_prefix, read_opt=bound):
            yield cast(bytes, key)

    def _count_keys(self, b: Bucket) -> int:
        return sum(1 for _ in self._bucket_keys(b))

    def _refill(self, b: Bucket, words: int) -> None:
        """Give bucket ``b`` ``words`` new words (granted by the budget) and set them from its
        keys on disk: one pass, in chunks, holding no more than a chunk of keys (the registry
        and the keys are written in one batch, so every key belongs to a registered
        bucket)."""
        self.memory.filters.release(len(b.words))
        b.words = new_words(words)
        b.count = 0
        chunk: list[bytes] = []
        for key in self._bucket_keys(b):
            chunk.append(key)
            if len(chunk) == _REBUILD_CHUNK:
                self._mark_keys(b, chunk)
                chunk.clear()
        self._mark_keys(b, chunk)

    def _mark_keys(self, b: Bucket, keys: list[bytes]) -> None:
        rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, _KEY_BYTES)
        mark(b.words, np.ascontiguousarray(rows[:, 9:]).tobytes())
        b.count += len(keys)

    def _new_bucket(self, start: int) -> Bucket:
        """A bucket sized for as many identities as the newest one holds (the partition's
        rate over a span; the first bucket of a store starts at the smallest size)."""
        seen = max((b.count for b in self._buckets.values()), default=0)
        words = self.memory.filters.grant(words_for(seen, self.settings.filter_bytes))
        b = Bucket(start, start + self._span, new_words(words), key_prefix=b"t" + _t(start))
        self._buckets[start] = b
        self._opened.append(b)
        return b

    def _grow_full(self) -> None:
        """Rebuild larger each bucket filled past IDENTITIES_PER_WORD per word (its keys are
        on disk: called after a write). Each rebuild at least quadruples the bucket, so the
        keys read for it are a fraction of those added since."""
        grown = False
        budget = self.memory.filters
        for b in self._buckets.values():
            if b.count <= IDENTITIES_PER_WORD * len(b.words):
                continue
            wanted = words_for(b.count, self.settings.filter_bytes)
            if wanted <= len(b.words):
                continue   # at dedup.filter_bytes already
            granted = budget.grant(wanted)
            if granted <= len(b.words):
                budget.release(granted)   # the worker's budget is spent
                continue
            self._refill(b, granted)
            grown = True
        if grown:
            self._relive()

    def _relive(self) -> None:
        self.live_bits = [self._buckets[s].words for s in sorted(self._buckets, reverse=True)]

    # -- identities -----------------------------------------------------------------------

    def __contains__(self, identity: bytes) -> bool:
        if identity in self.unflushed:
            return True
        h = _from_bytes(identity, "little")
        m = MASKS[h >> MASK_SHIFT]
        for words in self.live_bits:
            if words[h & (len(words) - 1)] & m == m:
                return self._confirm(identity, h, m)
        return False

    def _confirm(self, identity: bytes, h: int, m: int) -> bool:
        """The filter says maybe: ask RocksDB, in each bucket whose bits are all set."""
        get = self._db.get
        for start in sorted(self._buckets, reverse=True):
            b = self._buckets[start]
            if b.words[h & (len(b.words) - 1)] & m == m:
                self.disk_reads += 1
                if get(b.key_prefix + identity) is not None:
                    return True
        self.false_positives += 1
        return False

    def add(self, identity: bytes, event_time: int) -> None:
        self.unflushed[identity] = event_time

    def _place(self, batch: WriteBatch, pending: dict[bytes, int]) -> None:
        """Put identities (-> event time) into their buckets: filter bits and keys, built by
        numpy for the whole batch. Buckets open here, newest first, so that one older than
        anything the router can still look up is never opened (see the module docstring)."""
        n = len(pending)
        joined = b"".join(pending)
        if len(joined) != IDENTITY_BYTES * n:
            raise ValueError(f"dedup identities are {IDENTITY_BYTES} bytes (router.rule.identity)")
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(n, IDENTITY_BYTES)
        times = np.fromiter(pending.values(), dtype=np.int64, count=n)
        starts = times - times % self._span
        first = int(starts[0])
        if (starts == first).all():  # the usual batch: one bucket
            groups = [(first, rows)]
        else:
            groups = [(int(start), rows[starts == start]) for start in np.unique(starts)[::-1]]
        put = batch.put
        for start, group in groups:
            b = self._buckets.get(start) or self._open_bucket(start)
            if b is None:
                continue
            mark(b.words, group.tobytes())
            b.count += len(group)
            for key in _keys(b.key_prefix, group):
                put(key, b"")

    def _open_bucket(self, start: int) -> Bucket | None:
        """The bucket starting at ``start``, opened now; None if it is older than anything
        the router can still look up."""
        top = start if self._max_t is None else max(self._max_t, start)
        cut = top - self._retention - self._span
        if start + self._span <= cut:
            return None
        self._max_t = top
        b = self._new_bucket(start)
        self._drop([old for old in self._buckets.values() if old.end <= cut])
        self._relive()
        return b

    def _drop(self, buckets: list[Bucket]) -> None:
        for b in buckets:
            del self._buckets[b.start]
            self.memory.filters.release(len(b.words))
            if b in self._opened:
                self._opened.remove(b)
            self._dropped.append(b)

    # -- metadata -------------------------------------------------------------------------

    def put_meta(self, name: str, value: bytes) -> None:
        self._pending_meta[b"m" + name.encode()] = value

    def get_meta(self, name: str) -> bytes | None:
        key = b"m" + name.encode()
        if key in self._pending_meta:
            return self._pending_meta[key]
        return self._db.get(key)

    # -- maintenance ----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Identities added since the last flush (not yet durable)."""
        return len(self.unflushed)

    def flush(self) -> None:
        """Write buffered identities, new buckets, dropped buckets and metadata as one
        atomic batch."""
        self._write(self.unflushed, self._pending_meta)
        self.unflushed.clear()
        self._pending_meta.clear()

    def write_now(self, identities: dict[bytes, int]) -> None:
        """Write ``identities`` (-> event time) at once, and nothing buffered with them: they
        are records already in the output log (another writer's, read in before this worker
        produces), while the buffer holds the open batch's, written only once it is delivered.
        """
        self._write(identities, {})

    def _write(self, identities: dict[bytes, int], meta: dict[bytes, bytes]) -> None:
        """Write ``identities``, ``meta``, new buckets and dropped buckets as one atomic
        batch."""
        if not (identities or meta or self._opened or self._dropped):
            return
        batch = WriteBatch(raw_mode=True)
        if identities:
            self._place(batch, identities)
        for b in self._opened:
            batch.put(b"b" + b.key_prefix[1:], _t(b.end))
        for b in self._dropped:
            start = b.key_prefix[1:]
            batch.delete_range(b.key_prefix, b"t" + _t(b.start + 1))
            batch.delete(b"b" + start)
        for key, value in meta.items():
            batch.put(key, value)
        self._db.write(batch)
        self._opened.clear()
        self._dropped.clear()
        if identities:
            self._grow_full()
        self.memory.relieve()

    def memtable_bytes(self) -> int:
        """What the store's active memtable holds (router.dedup.memory.StoreMemory.relieve)."""
        return self._db.property_int_value("rocksdb.cur-size-active-mem-table") or 0

    def flush_memtable(self) -> None:
        """Have RocksDB flush the store's memtable to disk, in the background."""
        self._db.flush(False)

    def purge(self, before_event_time: int) -> int:
        """Forget the buckets that end at or below ``before_event_time`` (their identities are
        all older); return how many identities they held. Identities at or above it are kept,
        and some below it may be, until their whole bucket is below.

        Writes the buckets' registrations and drops only: the buffered identities and
        metadata stay buffered. They are the open batch's, whose output may not be delivered
        or committed yet (the worker purges every store now and then, a partition with its
        commit in flight included); written now, a batch that then aborts would leave its
        identities in the store, trusted by the takeover that replays it, and its records
        would be suppressed as duplicates of output that never was."""
        gone = [b for b in self._buckets.values() if b.end <= before_event_time]
        if gone:
            self._drop(gone)
            self._relive()
        self._write({}, {})
        return sum(b.count for b in gone)

    def __len__(self) -> int:
        """Identities added and not purged (one added twice counts twice)."""
        return sum(b.count for b in self._buckets.values()) + len(self.unflushed)

    @property
    def filter_bytes(self) -> int:
        return sum(len(b.words) * 8 for b in self._buckets.values())

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def close(self) -> None:
        """Write the filters (so the next open need not scan) and close; identities and
        metadata not flushed are dropped (see the module docstring)."""
        self.unflushed.clear()
        self._pending_meta.clear()
        self.flush()  # bucket registrations and drops
        starts = sorted(self._buckets)
        with (self.path / FILTERS_FILE).open("wb") as f:
            for start in starts:
                words = self._buckets[start].words
                if sys.byteorder == "big":
                    words = array("Q", words)
                    words.byteswap()
                words.tofile(f)
        # The manifest last: present only if the file before it is complete.
        self._db.put(_FILTERS_KEY, json.dumps({
            "sizes": [len(self._buckets[s].words) for s in starts], "starts": starts,
            "counts": [self._buckets[s].count for s in starts]}).encode())
        self._release_filters()
        self.memory.unregister(self)
        self._db.close()

    def _release_filters(self) -> None:
        for b in self._buckets.values():
            self.memory.filters.release(len(b.words))
            b.words = array("Q")
        self.live_bits = []

    def destroy(self) -> None:
        """Close and delete the directory (the partition moved away or is rebuilt)."""
        self.unflushed.clear()
        self._pending_meta.clear()
        self._release_filters()
        self._buckets.clear()
        self.memory.unregister(self)
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
