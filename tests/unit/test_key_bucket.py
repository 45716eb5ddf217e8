"""The bucket of a Kafka key (cutover.key_bucket): BLAKE2b of the key bytes, 8-byte digest,
big-endian, modulo 10,000; the same on every worker, in every process, in any language."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from hashlib import blake2b

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cutover.key_bucket import BUCKETS, key_bucket

# (key, 8-byte BLAKE2b digest, bucket): what another implementation must reproduce
VECTORS = [
    (b"", "e4a6a0577479b2b4", 9876),
    (b"a", "40f89e395b66422f", 3343),
    (b"order-1", "2599000e8c1b023d", 6429),
    (b"\x00\xff", "b0c72e78c8f09ce4", 2500),
]


@pytest.mark.parametrize(("key", "digest", "bucket"), VECTORS)
def test_the_test_vectors_hold(key: bytes, digest: str, bucket: int) -> None:
    assert blake2b(key, digest_size=8).hexdigest() == digest
    assert int(digest, 16) % BUCKETS == bucket
    assert key_bucket(key) == bucket


def test_a_fresh_process_with_another_hash_seed_puts_keys_in_the_same_buckets() -> None:
    code = ("from cutover.key_bucket import key_bucket; "
            f"print([key_bucket(k) for k in {[k for k, _, _ in VECTORS]!r}])")
    for seed in ("1", "4242"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == str([b for _, _, b in VECTORS])


@given(st.binary(max_size=200))
def test_every_key_has_one_bucket_in_range(key: bytes) -> None:
    assert 0 <= key_bucket(key) < BUCKETS
    assert key_bucket(key) == key_bucket(bytes(key))


def test_keys_alike_in_form_spread_evenly_over_the_buckets() -> None:
    """Order ids that differ only in a counter: each tenth of the buckets gets its tenth of
    the keys (within 3%), so a 10% canary gets about 10% of such keys."""
    tenths = Counter(key_bucket(b"order-%d" % i) * 10 // BUCKETS for i in range(100_000))
    assert sorted(tenths) == list(range(10))
    assert all(abs(n - 10_000) < 300 for n in tenths.values()), tenths
