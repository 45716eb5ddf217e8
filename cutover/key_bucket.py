"""The bucket of a Kafka key, for the per-key canary: which of 10,000 buckets a key falls in.

The bucket is ``BLAKE2b(key)`` (RFC 7693: unkeyed, no salt or personalization, an 8-byte
digest), read as an unsigned big-endian 64-bit integer, modulo 10,000. Only the key's bytes
count: not its partition, the version, the event time or anything of the process, so every
worker, every restart and any other implementation (router/native/_blake2b.h has the same BLAKE2b
with a chosen digest length) puts a key in the same bucket. BLAKE2b is not the murmur2 of
Kafka's default partitioner, so a canary's share of the keys spreads evenly over the
partitions instead of following them. The empty key ``b""`` is a key like any other; a
record without a key (a null key) has no bucket.

Test vectors (tests/unit/test_key_bucket.py checks them, also in a fresh process)::

    key            8-byte BLAKE2b digest    bucket
    b""            e4a6a0577479b2b4         9876
    b"a"           40f89e395b66422f         3343
    b"order-1"     2599000e8c1b023d         6429
    b"\\x00\\xff"     b0c72e78c8f09ce4         2500
"""

from __future__ import annotations

from hashlib import blake2b

BUCKETS = 10_000     # a share is a whole number of these: one basis point each
DIGEST_BYTES = 8


def key_bucket(key: bytes) -> int:
    """The bucket of ``key``, in ``range(BUCKETS)``."""
    digest = blake2b(key, digest_size=DIGEST_BYTES).digest()
    return int.from_bytes(digest, "big") % BUCKETS
