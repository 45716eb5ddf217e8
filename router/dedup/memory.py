"""The memory of a worker's dedup stores, budgeted per worker, not per partition.

A worker owns one dedup store per raw partition (router.dedup.store), from a few to hundreds.
Sized per store, their caches, memtables and filters grew with the partitions a worker owns,
and filled up over the retention window whether the partitions were busy or not. Here every
store of a worker shares:

* one RocksDB block cache (``store_memory.block_cache_bytes``): data and index blocks of all
  the stores, the busy ones getting the room;
* one RocksDB write-buffer manager (``store_memory.write_buffer_bytes``) for the memtables of
  all the stores together, so a store's memtable bound (``dedup.write_buffer_bytes``) is a
  ceiling, not a reservation. RocksDB's manager flushes only the store being written, and,
  allowed to stall, it stalls that store's writers until the total drops: with the memory held
  by stores that are not written (a quiet partition's memtable is flushed by nothing), that is
  for good, a worker alive and idle. So the manager never stalls, and the worker flushes the
  largest memtables of all its stores itself once they pass three quarters of the budget
  (:meth:`StoreMemory.relieve`). A memtable takes its memory in arena blocks, and holds
  one from the moment it is created: RocksDB's default block (an eighth of the memtable bound,
  1 MiB at the default 8 MiB) made a worker's empty memtables alone pass the threshold at a few
  dozen partitions, and every write flushed memtables holding nothing (a takeover of 256
  partitions spent seconds on it). So a block is :data:`ARENA_BLOCK_BYTES`, and a memtable
  holding no more than one block is never flushed;
* one budget for the front filters (``store_memory.filter_bytes``): a filter bucket is sized
  for the identities its store is seeing (router.dedup.bloom.words_for) and takes its words
  from this budget; once the budget is spent a new or regrown bucket gets what is left (at
  least :data:`router.dedup.bloom.MIN_WORDS`), which costs RocksDB reads, never a record.

The budget is accounting, not an allocator: a store asks :meth:`FilterBudget.grant` before it
allocates a bucket's words and gives them back with :meth:`FilterBudget.release` when the
bucket is dropped, regrown or its store closed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from rocksdict import Cache, WriteBufferManager

from cutover.settings import StoreMemorySettings
from router.base.metrics import family_header
from router.dedup.bloom import MIN_WORDS, floor_pow2

# The arena block of every store's memtable: what an empty memtable holds. 1,000 partitions'
# empty memtables stay under half the default store_memory.write_buffer_bytes.
ARENA_BLOCK_BYTES = 32 * 1024


@dataclass
class FilterBudget:
    """Words (8 bytes each) of front filter a worker's stores may hold together."""

    words: int
    used: int = 0
    refused: int = 0   # grants cut short by the budget (a metric: the budget is too small)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def grant(self, wanted: int) -> int:
        """Words for a bucket that wants ``wanted`` (a power of two): all of them if the
        budget has room, else the largest power of two that fits, and never fewer than
        MIN_WORDS (so a store always has a filter; the floor is a few KiB per bucket)."""
        with self._lock:
            room = self.words - self.used
            granted = wanted if wanted <= room else max(MIN_WORDS, floor_pow2(room))
            if granted < wanted:
                self.refused += 1
            self.used += granted
            return granted

    def take(self, words: int) -> None:
        """Account for ``words`` already decided (a saved filter read back at its size)."""
        with self._lock:
            self.used += words

    def release(self, words: int) -> None:
        with self._lock:
            self.used = max(0, self.used - words)


class Memtables(Protocol):
    """A store whose memtable the worker may flush to stay within its budget
    (router.dedup.store.DedupStore)."""

    def memtable_bytes(self) -> int: ...

    def flush_memtable(self) -> None: ...


class StoreMemory:
    """What a worker's dedup stores share. Built once per worker (one per process)."""

    def __init__(self, settings: StoreMemorySettings | None = None) -> None:
        self.settings = settings = settings or StoreMemorySettings()
        self.block_cache = Cache(settings.block_cache_bytes)
        self.write_buffers = WriteBufferManager(settings.write_buffer_bytes, False)
        self.filters = FilterBudget(settings.filter_bytes // 8)
        self.memtable_flushes = 0   # memtables flushed by :meth:`relieve` (a metric)
        self._stores: dict[int, Memtables] = {}   # id -> the open stores
        self._lock = threading.Lock()

    def register(self, store: Memtables) -> None:
        with self._lock:
            self._stores[id(store)] = store

    def unregister(self, store: Memtables) -> None:
        """Before the store closes: once this returns, :meth:`relieve` does not touch it."""
        with self._lock:
            self._stores.pop(id(store), None)

    def relieve(self) -> int:
        """Once the memtables of all the stores pass three quarters of
        ``store_memory.write_buffer_bytes``, flush the largest (in the background) until what
        is left is under half of it; returns how many were flushed. A memtable of one arena
        block holds next to nothing, and flushing it frees nothing: it is left alone. Called
        after every write of a store, from the thread that wrote (cheap below the threshold:
        one counter read)."""
        budget = self.settings.write_buffer_bytes
        used = self.write_buffers.get_usage()
        if used <= budget * 3 // 4:
            return 0
        flushed = 0
        with self._lock:
            sizes = sorted(((s.memtable_bytes(), k) for k, s in self._stores.items()),
                           reverse=True)
            over = used - budget // 2
            for size, k in sizes:
                if over <= 0 or size <= ARENA_BLOCK_BYTES:
                    break
                self._stores[k].flush_memtable()
                over -= size
                flushed += 1
            self.memtable_flushes += flushed
        return flushed

    @property
    def filter_bytes_used(self) -> int:
        return self.filters.used * 8

    def prometheus(self) -> str:
        """The stores' memory metrics, declared with the worker's others
        (router.base.metrics.METRICS)."""
        lines: list[str] = []
        for name, value in (("store_filter_bytes", self.filter_bytes_used),
                            ("store_filter_budget_bytes", self.settings.filter_bytes),
                            ("store_block_cache_bytes", self.block_cache.get_usage()),
                            ("store_write_buffer_bytes", self.write_buffers.get_usage()),
                            ("store_memtable_flushes_total", self.memtable_flushes),
                            ("store_filter_refusals_total", self.filters.refused)):
            lines.extend(family_header(name))
            lines.append(f"cutover_{name} {value}")
        return "\n".join(lines) + "\n"
