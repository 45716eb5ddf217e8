"""Dedup store at scale: RSS, disk and per-record cost against the identities in retention,
the store's open time, and the curve drawn into ``docs/dedup-store-scale.png`` (make bench;
printed, not asserted).

Two settings: the default memory settings (a 16 MiB filter per partition) at 1M and 10M
identities, and the filter sized for the identities in retention (``filter_bytes_for``, the
README's sizing rule) at 10M and 50M; up to ``CUTOVER_BENCH_DEDUP_MAX`` identities (default
10,000,000; 50M takes a quarter of an hour and ~3 GB of disk on two cores). The default
filter is not run at 50M: 50M identities saturate 16 MiB, nearly every new identity becomes a
RocksDB read, and the fill takes over an hour (a run stopped after 85 minutes). Each size runs in a
process of its own (tests/bench/dedup_scale.py), under the system temporary directory, removed
afterwards. The reference line is the set-based store this one replaced: a Python set of the
16-byte identities, measured here at 1M and drawn linearly (it was measured at +393 MB for 2M
identities through the router).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cutover.settings import DedupSettings, StoreMemorySettings
from router.dedup.bloom import filter_bytes_for
from tests.bench.report import REPO, load_line, record

pytestmark = [pytest.mark.bench]

# (identities, sized filter?)
RUNS = ((1_000_000, False), (10_000_000, False), (10_000_000, True), (50_000_000, True))
MAX = int(os.environ.get("CUTOVER_BENCH_DEDUP_MAX", "10000000"))
PNG = REPO / "docs" / "dedup-store-scale.png"

SET_PROBE = """
import os, sys
from hashlib import blake2b
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
r0 = rss()
s = {blake2b(b"%d" % i, digest_size=16).digest() for i in range(1_000_000)}
print((rss() - r0) / len(s))
"""


def _run_size(n: int, sized: bool) -> dict:
    extra = [str(filter_bytes_for(n))] if sized else []
    with tempfile.TemporaryDirectory(prefix="cutover-dedup-scale-") as tmp:
        done = subprocess.run([sys.executable, "-m", "tests.bench.dedup_scale", str(n),
                               str(Path(tmp) / "store"), *extra], cwd=REPO, check=True,
                              capture_output=True, text=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "sized": sized}


def _draw(rows: list[dict], set_bytes: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = [(label, [r for r in rows if r["sized"] is sized])
              for label, sized in (("default filter", False), ("sized filter", True))]
    series = [(label, rs) for label, rs in series if rs]
    for label, rs in series:
        xs = [r["identities"] / 1e6 for r in rs]
        mem.plot(xs, [r["rss_growth_mb"] for r in rs], "o-", label=f"RSS growth, {label}")
        mem.plot(xs, [r["disk_mb"] for r in rs], "s:", label=f"disk, {label}")
    xs = sorted({r["identities"] / 1e6 for r in rows})
    mem.plot(xs, [x * 1e6 * set_bytes / 2**20 for x in xs], "--", color="grey",
             label=f"RSS, a set of every identity ({set_bytes:.0f} B each)")
    mem.set_xscale("log")
    mem.set_yscale("log")
    mem.set_xlabel("identities in retention (millions)")
    mem.set_ylabel("MB")
    mem.set_title("dedup store memory and disk")
    mem.legend(fontsize=8)
    for label, rs in series:
        xs = [r["identities"] / 1e6 for r in rs]
        cost.plot(xs, [r["new_us_per_record"] for r in rs], "o-",
                  label=f"new identity: lookup + add, {label}")
        cost.plot(xs, [r["duplicate_us_per_lookup"] for r in rs], "s:",
                  label=f"duplicate: lookup (a RocksDB read), {label}")
    cost.set_xscale("log")
    cost.set_yscale("log")
    cost.set_xlabel("identities in retention (millions)")
    cost.set_ylabel("microseconds")
    cost.set_title("cost per record")
    cost.legend(fontsize=8)
    d, w = DedupSettings(), StoreMemorySettings()
    fig.suptitle(f"default filter {d.filter_bytes >> 20} MiB; sized filter: "
                 "filter_bytes_for(identities); block cache "
                 f"{w.block_cache_bytes >> 20} MiB, write buffer {d.write_buffer_bytes >> 20} "
                 "MiB (x2)", fontsize=9)
    fig.tight_layout()
    fig.savefig(PNG, dpi=110)
    plt.close(fig)


def test_dedup_store_at_scale() -> None:
    runs = [(n, sized) for n, sized in RUNS if n <= MAX]
    rows = []
    for n, sized in runs:
        rows.append(_run_size(n, sized))
        print(f"\n{n:,} identities, {'sized' if sized else 'default'} filter: done", flush=True)
    set_bytes = float(subprocess.run([sys.executable, "-c", SET_PROBE], check=True,
                                     capture_output=True, text=True).stdout)
    print(f"\ndedup store at scale; {load_line()}")
    print(f"{'identities':>11} {'setting MB':>10} {'RSS +MB':>8} {'B/ident':>8} "
          f"{'disk MB':>8} {'filter MB':>9} "
          f"{'fill us':>8} {'new us':>7} {'new->disk':>9} {'dup us':>7} {'open s':>7} "
          f"{'open RSS MB':>11} {'crash open s':>12}")
    for r in rows:
        print(f"{r['identities']:>11,} {r['filter_setting_mb']:>10.0f} "
              f"{r['rss_growth_mb']:>8.1f} "
              f"{r['rss_bytes_per_identity']:>8.1f} {r['disk_mb']:>8.1f} {r['filter_mb']:>9.1f} "
              f"{r['fill_us_per_record']:>8.2f} {r['new_us_per_record']:>7.2f} "
              f"{r['new_disk_read_share']:>9.1%} {r['duplicate_us_per_lookup']:>7.2f} "
              f"{r['open_s']:>7.2f} {r['rss_after_open_mb']:>11.1f} "
              f"{r['open_after_crash_s']:>12.1f}")
    print(f"a Python set of 16-byte identities (the store this replaced): {set_bytes:.0f} "
          f"bytes of RSS per identity; largest size run: {runs[-1][0]:,} "
          f"(CUTOVER_BENCH_DEDUP_MAX={MAX:,})")
    _draw(rows, set_bytes)
    print(f"curve: {PNG.relative_to(REPO)}")
    record("dedup_store_scale", {"runs": runs, "rows": rows,
                                 "set_bytes_per_identity": round(set_bytes, 1)})
