"""What ``cutover demo`` shows at the end: the output checked against a reference computed from
the input alone (lost, duplicated, wrong version, wrong value), the output gap around the switch
against the job's own rhythm, and a timeline image."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cutover.cli import CliError
from cutover.cli.orders import Order
from router.operator import RouteView


def fmt(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%H:%M:%S", time.gmtime(ms / 1000))


@dataclass(frozen=True)
class Rec:
    """A record read back: what the summary and the timeline need."""

    value: bytes | None
    headers: dict[str, str]
    timestamp: float  # seconds

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def tag(self, name: str) -> str:
        """A header every tagged record carries (bg.version, bg.event_time)."""
        return self.headers[name]


def read_all(bootstrap: str, topic: str) -> list[Rec]:
    from router.kafka_io import base_conf, read_to_end

    return [Rec(m.value(), {k: v.decode() for k, v in (m.headers() or []) if v is not None},
                m.timestamp()[1] / 1000)
            for m in read_to_end(base_conf(bootstrap), topic)]


def summarize(bootstrap: str, v: RouteView, orders: list[Order], switched_at: float,
              cleared_at: float, out: Path, *, partitions: int, window_ms: int
              ) -> dict[str, Any]:
    """Check the output against a reference computed from the input orders alone, print the
    summary, write ``summary.json`` and ``timeline.png`` into ``out``; return the summary."""
    from spark_tagger.partitioner import partition_for

    raw = read_all(bootstrap, "demo.totals.raw")
    output = read_all(bootstrap, "demo.totals")
    dlq = read_all(bootstrap, "demo.totals.dlq")
    transition = v.plan.transition if v.plan is not None else None
    if transition is None:
        raise CliError("the route has no transition to summarize; see the router's log", 1)
    _, _, boundary = transition
    bound_p = {p: ps.boundary if ps.boundary is not None else boundary
               for p, (ps, *_rest) in v.partitions.items()}
    final_wm = {p: ps.watermarks for p, (ps, *_rest) in v.partitions.items()}

    # The reference, from the input alone: every window of every customer.
    ref: dict[tuple[str, int], int] = Counter()
    for o in orders:
        ref[(o.customer, o.ts // window_ms * window_ms + window_ms)] += 1
    expected: dict[tuple[str, int], str] = {}
    for (cust, end), _n in ref.items():
        p = partition_for(cust.encode(), None, partitions)
        version = "blue" if end < bound_p[p] else "green"
        if end < final_wm[p].get(version, -1):  # closed by that version's final watermark
            expected[(cust, end)] = version

    seen: Counter[tuple[str, int]] = Counter()
    wrong_version = wrong_value = 0
    by_version: Counter[str] = Counter()
    for r in output:
        body = json.loads(r.value or b"null")
        end = int(r.tag("bg.event_time"))
        k = (body["customer"], end)
        seen[k] += 1
        ver = r.tag("bg.version")
        by_version[ver] += 1
        if k in expected and expected[k] != ver:
            wrong_version += 1
        if body["orders"] != ref.get(k):
            wrong_value += 1
    lost = sum(1 for k in expected if k not in seen)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    raw_data = Counter(r.tag("bg.version") for r in raw if r.header("bg.kind") != "heartbeat")
    stamps = sorted(r.timestamp for r in output)
    near = [b - a for a, b in itertools.pairwise(stamps)
            if switched_at - 30 <= b <= cleared_at + 30]
    # The same measure away from the switch (after the first output has settled), so the
    # gap around the switch can be compared with the job's own rhythm of micro-batches.
    settled = stamps[0] + 20 if stamps else 0.0
    elsewhere = [b - a for a, b in itertools.pairwise(stamps)
                 if b >= settled and not switched_at - 30 <= b <= cleared_at + 30]
    c = v.counters
    report = {
        "records_in": dict(raw_data), "forwarded": dict(by_version),
        "suppressed": c.suppressed, "duplicates_removed": c.duplicates,
        "dead_lettered": len(dlq), "expected": len(expected), "lost": lost,
        "duplicated": duplicated, "wrong_version": wrong_version, "wrong_value": wrong_value,
        "largest_gap_s": max(near, default=0.0),
        "largest_gap_elsewhere_s": max(elsewhere, default=0.0),
        "boundary": boundary, "pinned": bound_p,
        "switch_to_clear_s": cleared_at - switched_at,
    }
    png = out / "timeline.png"
    draw_timeline(png, output, raw, boundary)
    (out / "summary.json").write_text(json.dumps(report, indent=2, default=str))
    print()
    print("summary")
    print(f"  input orders written        {len(orders)}")
    print(f"  raw records in (data)       {fmt_counts(raw_data)}")
    print(f"  forwarded per version       {fmt_counts(by_version)}")
    print(f"  suppressed (non-primary)    {fmt_counts(c.suppressed)}")
    print(f"  duplicates removed          {c.duplicates}")
    print(f"  dead-lettered               {len(dlq)}")
    print(f"  boundary                    {boundary} ({fmt(boundary)} event time); per "
          f"partition {bound_p}")
    print(f"  switch -> CLEAR_TO_TEARDOWN {cleared_at - switched_at:.1f} s")
    print(f"  checked against reference   {len(expected)} windows expected: lost {lost}, "
          f"duplicated {duplicated}, wrong version {wrong_version}, wrong count {wrong_value}")
    print(f"  largest output gap          {report['largest_gap_s']:.2f} s around the switch, "
          f"{report['largest_gap_elsewhere_s']:.2f} s elsewhere (micro-batch rhythm)")
    print(f"  timeline                    {png}")
    print(f"  summary, logs               {out / 'summary.json'}, {out / 'logs'}")
    return report


def fmt_counts(c: Any) -> str:
    return ", ".join(f"{k}={n}" for k, n in sorted(dict(c).items())) or "0"


def draw_timeline(png: Path, output: list[Any], raw: list[Any], boundary: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"blue": "#1f77b4", "green": "#2ca02c"}
    t0 = min((int(r.tag("bg.event_time")) for r in output), default=boundary)
    bucket = 60_000
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for r in output:
        t = int(r.tag("bg.event_time"))
        counts[r.tag("bg.version")][(t - t0) // bucket] += 1
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    buckets = sorted({b for c in counts.values() for b in c})
    bottom = [0] * len(buckets)
    for version, c in sorted(counts.items()):
        ys = [c.get(b, 0) for b in buckets]
        ax1.bar([b for b in buckets], ys, bottom=bottom, width=0.9, label=f"forwarded {version}",
                color=colours.get(version))
        bottom = [a + y for a, y in zip(bottom, ys, strict=True)]
    bx = (boundary - t0) / bucket
    for ax in (ax1, ax2):
        ax.axvline(bx, color="black", linestyle="--", linewidth=1, label="boundary")
    ax1.set_ylim(0, max(bottom, default=1) * 1.25)
    ax1.set_ylabel("windows forwarded per minute\nof event time")
    ax1.legend(loc="upper left", ncols=3)
    ax1.set_title("cutover demo: output by event time, coloured by the version it came from")
    wm: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in raw:
        w = r.header("bg.watermark")
        if w is not None:
            wm[r.tag("bg.version")].append(((int(w) - t0) / bucket, r.timestamp))
    start = min((ts for pts in wm.values() for _, ts in pts), default=0)
    for version, pts in sorted(wm.items()):
        pts.sort(key=lambda p: p[1])
        ax2.plot([x for x, _ in pts], [ts - start for _, ts in pts], ".", markersize=2,
                 color=colours.get(version), label=f"{version} watermark")
    ax2.set_xlabel("event time (minutes from the first window)")
    ax2.set_ylabel("wall clock (s) when the\nwatermark was emitted")
    ax2.legend(loc="upper left", ncols=3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
