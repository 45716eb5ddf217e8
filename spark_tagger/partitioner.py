"""Kafka's default partitioner for keyed records (murmur2), computed in Python.

Blue and green must put the same key on the same partition (the router maps raw partition ``p``
of every version to output partition ``p``), and a replayed batch must land where the first
attempt did. So the tagger picks partitions itself instead of leaving it to librdkafka, whose
default (``consistent_random``, CRC32) differs from the Java client's.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The Java client's ``Utils.murmur2``: a signed 32-bit hash."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, value: bytes | None, partitions: int) -> int:
    """Partition of a record: Kafka's default for a key; for a null key, the same hash of the value.

    Kafka spreads null-key records at random (sticky); a deterministic choice keeps replays and
    the other version's identical records on the same partition.
    """
    data = key if key is not None else (value or b"")
    return (murmur2(data) & 0x7FFFFFFF) % partitions
