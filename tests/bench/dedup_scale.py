"""One size of the dedup-store scale benchmark, in a process of its own so that its RSS is the
store's alone: fill a store with N identities in retention as the router does, then measure.

Usage: python -m tests.bench.dedup_scale N DIR [FILTER_BYTES]   (prints one JSON line; DIR is
removed; FILTER_BYTES: ``dedup.filter_bytes``, default the setting's default)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rocksdict import Options, Rdict

from cutover.settings import DedupSettings, StoreMemorySettings
from router.dedup.memory import StoreMemory
from router.dedup.store import DedupStore
from router.rule.identity import record_identity

BASE_T = 1_767_225_600_000
RETENTION_MS = 3_600_000     # every identity of the run stays within it
FLUSH_EVERY = 20_000         # a produce batch
SAMPLE = 200_000             # lookups timed at the filled size


@dataclass(frozen=True)
class SizeResult:
    identities: int
    filter_setting_mb: float     # dedup.filter_bytes of the run
    rss_growth_mb: float         # after the fill, over the process before the store opened
    rss_bytes_per_identity: float
    disk_mb: float
    filter_mb: float
    fill_us_per_record: float    # identity + lookup + add + the batch flushes, the whole fill
    new_us_per_record: float     # lookup + add of a new identity, at the filled size
    new_disk_read_share: float   # of those, the share the filter passed on to RocksDB
    duplicate_us_per_lookup: float  # lookup of an identity already there (a RocksDB read)
    open_s: float                # reopen after a clean close (filters read back)
    rss_after_open_mb: float     # a fresh process's growth from that open alone
    open_after_crash_s: float    # reopen with no saved filters (one scan of the keys)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ident(i: int, n: int) -> tuple[bytes, int]:
    t = BASE_T + i * RETENTION_MS // n
    return record_identity(b"k%d" % (i % 5000), b'{"n": %d}' % i, t), t


def fill(store: DedupStore, n: int) -> None:
    for i in range(n):
        identity, t = ident(i, n)
        if identity not in store:
            store.add(identity, t)
        if i % FLUSH_EVERY == FLUSH_EVERY - 1:
            store.flush()
    store.flush()


def measure(n: int, path: Path, filter_bytes: int | None = None) -> SizeResult:
    settings = (DedupSettings(retention_ms=RETENTION_MS) if filter_bytes is None else
                DedupSettings(retention_ms=RETENTION_MS, filter_bytes=filter_bytes))
    rss0 = rss()
    # one store alone: the worker's filter budget is no limit here (the store's
    # dedup.filter_bytes is)
    store = DedupStore(path, settings, StoreMemory(StoreMemorySettings(
        filter_bytes=max(settings.filter_bytes, StoreMemorySettings().filter_bytes))))
    start = time.perf_counter()
    fill(store, n)
    fill_s = time.perf_counter() - start
    # New identities at the top of the window, and identities already there.
    top = BASE_T + RETENTION_MS - 1
    k = min(SAMPLE, n)
    fresh = [record_identity(b"new", b"%d" % i, top) for i in range(k)]
    old = [ident(i, n)[0] for i in random.Random(1).sample(range(n), k)]
    reads0 = store.disk_reads
    start = time.perf_counter()
    for identity in fresh:
        if identity not in store:
            store.add(identity, top)
    new_s = time.perf_counter() - start
    new_reads = store.disk_reads - reads0
    store.flush()
    start = time.perf_counter()
    found = sum(1 for identity in old if identity in store)
    dup_s = time.perf_counter() - start
    assert found == k, f"{k - found} identities were not found"
    del fresh, old
    growth = rss() - rss0
    result = dict(identities=n, filter_setting_mb=settings.filter_bytes / 2**20,
                  rss_growth_mb=growth / 2**20,
                  rss_bytes_per_identity=growth / n, disk_mb=store.disk_bytes() / 2**20,
                  filter_mb=store.filter_bytes / 2**20, fill_us_per_record=fill_s / n * 1e6,
                  new_us_per_record=new_s / k * 1e6,
                  new_disk_read_share=new_reads / k,
                  duplicate_us_per_lookup=dup_s / k * 1e6)
    store.close()
    return SizeResult(**result, **reopen(path, settings))


def reopen(path: Path, settings: DedupSettings) -> dict[str, float]:
    """Open time after a clean close, in a fresh process (its RSS growth is the open's), and
    after a crash (the filter manifest removed, as a kill leaves it)."""
    probe = ("import sys, time, json; from pathlib import Path; "
             "from tests.bench.dedup_scale import rss, DedupStore, DedupSettings; "
             "r0 = rss(); t0 = time.perf_counter(); "
             "s = DedupStore(Path(sys.argv[1]), DedupSettings.model_validate_json(sys.argv[2])); "
             "dt = time.perf_counter() - t0; "
             "print(json.dumps([dt, (rss() - r0) / 2**20, s.filters_rebuilt])); s.close()")
    out: dict[str, float] = {}
    for label in ("open_s", "open_after_crash_s"):
        if label == "open_after_crash_s":
            db = Rdict(str(path), Options(raw_mode=True))
            db.delete(b"mfilters")
            db.close()
        done = subprocess.run([sys.executable, "-c", probe, str(path),
                               settings.model_dump_json()], check=True,
                              capture_output=True, text=True, cwd=Path(__file__).parents[2])
        dt, grown, rebuilt = json.loads(done.stdout.strip().splitlines()[-1])
        assert rebuilt == (label == "open_after_crash_s")
        out[label] = dt
        if label == "open_s":
            out["rss_after_open_mb"] = grown
    return out


def main() -> None:
    n, path = int(sys.argv[1]), Path(sys.argv[2])
    filter_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else None
    try:
        print(json.dumps(asdict(measure(n, path, filter_bytes))))
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
