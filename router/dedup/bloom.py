"""The dedup store's front filter: time-bucketed, blocked Bloom filters in plain arrays.

Why: most identities the router looks up are new, and a new identity should not cost a
RocksDB read. A Python set of the identities answered that at once but cost ~206 bytes of
RSS per identity (2M identities: +393 MB); this filter answers it from a fixed number of bits,
sized for the identities a partition sees, whatever their number in retention. A "maybe" is
confirmed by RocksDB, so a false positive costs one read and never a lost record.

Blocked Bloom filter: one 64-bit word per identity (chosen by the identity's low bits), in
which the identity sets :data:`BITS_PER_IDENTITY` bits (a mask chosen by its top bits). One
word read per bucket per lookup: the cheapest shape for the per-record path in CPython, where
every extra bit probe is another bytecode round. Identities are BLAKE2b digests
(``router.rule.identity``), already uniform, so their bits index the filter directly and no further
hashing is done. The masks come from BLAKE2b of their index, so a filter written to disk by
one process reads the same in any other.

Time buckets: a bucket holds the identities whose event time falls in one span (half the
retention), with its own bit array. The retention purge drops whole buckets, so nothing is
ever deleted from a filter, and a lookup probes every live bucket (at most four: the retention
window covers three spans, plus one just opened).

Sizes: each bucket has its own power-of-two number of words (the low bits of an identity pick
its word, so a lookup masks them with the bucket's size). A bucket opens sized for the
identities of the bucket before it (:func:`words_for`), and one that fills past
:data:`IDENTITIES_PER_WORD` per word is rebuilt larger from its keys in RocksDB
(router.dedup.store), up to a quarter of ``dedup.filter_bytes`` (:func:`max_words`) and within
the worker's budget (router.dedup.memory). So a quiet partition holds a few KiB of filter and a
busy one what its identities need.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from hashlib import blake2b

import numpy as np

BITS_PER_IDENTITY = 4
MAX_LIVE_BUCKETS = 4
SPANS_PER_RETENTION = 2
_MASK_INDEX_BITS = 12
MASK_SHIFT = 128 - _MASK_INDEX_BITS  # identities are 16 bytes, read as one 128-bit integer


def _masks() -> list[int]:
    out = []
    for j in range(1 << _MASK_INDEX_BITS):
        d = blake2b(b"cutover-dedup-filter" + j.to_bytes(2, "big"), digest_size=32).digest()
        m = 0
        for byte in d:
            m |= 1 << (byte & 63)
            if m.bit_count() == BITS_PER_IDENTITY:
                break
        out.append(m)
    return out


MASKS: list[int] = _masks()
_MASKS_NP = np.array(MASKS, dtype=np.uint64)
_HIGH_SHIFT = np.uint64(MASK_SHIFT - 64)


MIN_WORDS = 512           # the smallest bucket: 4 KiB
IDENTITIES_PER_WORD = 8   # at most, in a sized filter: a fuller bucket is rebuilt larger
SIZED_PER_WORD = 2        # what a bucket is sized for when it opens or is rebuilt


def floor_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n < 1)."""
    return 1 << (max(1, n).bit_length() - 1)


def ceil_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def max_words(filter_bytes: int) -> int:
    """The most words (8 bytes each) one bucket of a store may have: a quarter of its
    ``dedup.filter_bytes``, a power of two, >= 1."""
    return floor_pow2(filter_bytes // (8 * MAX_LIVE_BUCKETS))


def words_for(identities: int, filter_bytes: int) -> int:
    """Words of a bucket sized for ``identities``: :data:`SIZED_PER_WORD` per word, rounded up
    to a power of two, at least :data:`MIN_WORDS`, at most :func:`max_words`."""
    cap = max_words(filter_bytes)
    return min(cap, max(min(MIN_WORDS, cap), ceil_pow2(-(-identities // SIZED_PER_WORD))))


def filter_bytes_for(identities: int) -> int:
    """A ``dedup.filter_bytes`` for a partition with ``identities`` in retention: each bucket
    (half of them) at most :data:`IDENTITIES_PER_WORD` per word, so that a few percent of new
    identities reach RocksDB (docs/performance.md, "Dedup store at scale"); 4 to 8 bytes per
    identity, the power-of-two rounding deciding which."""
    words = max(1, -(-identities // (SPANS_PER_RETENTION * IDENTITIES_PER_WORD)))
    return 8 * MAX_LIVE_BUCKETS * (1 << (words - 1).bit_length())


def span_of(retention_ms: int) -> int:
    """Event-time span of one bucket."""
    return max(1, -(-retention_ms // SPANS_PER_RETENTION))


@dataclass(slots=True, eq=False)
class Bucket:
    """Identities with event time in [start, end): their filter bits and how many were added."""

    start: int
    end: int
    words: array[int]
    count: int = 0
    key_prefix: bytes = field(default=b"")


def new_words(n: int) -> array[int]:
    return array("Q", bytes(8 * n))


def mark(words: array[int], identities: bytes) -> None:
    """Set the bits of many identities (16 bytes each, concatenated) in one bucket: the
    per-identity work of :meth:`DedupStore.add`, done for a whole batch at once by numpy
    (a Python loop over the same is the cost this saves)."""
    if not identities:
        return
    halves = np.frombuffer(identities, dtype="<u8").reshape(-1, 2)
    index = (halves[:, 0] & np.uint64(len(words) - 1)).astype(np.intp)
    np.bitwise_or.at(np.frombuffer(words, dtype=np.uint64), index,
                     _MASKS_NP[halves[:, 1] >> _HIGH_SHIFT])
