"""The demo's picture: the output by event time, coloured by the version it came from, with
where each version took over; each version's watermark; and the output's rate on the wall
clock with both rollouts shaded, so a gap shows where it happened."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, NamedTuple

COLOURS = {"blue": "#1f77b4", "green": "#2ca02c"}
OTHER = "#d62728"
BUCKET_MS = 60_000


class Mark(NamedTuple):
    """An event time where a version took over, drawn as a dashed line."""

    event_time: int
    label: str
    version: str


def colour(version: str) -> str:
    return COLOURS.get(version, OTHER)


def draw_timeline(png: Path, output: list[Any], raw: list[Any], marks: list[Mark],
                  rollouts: list[tuple[float, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min((int(r.tag("bg.event_time")) for r in output), default=0)
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for r in output:
        t = int(r.tag("bg.event_time"))
        counts[r.tag("bg.version")][(t - t0) // BUCKET_MS] += 1
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 10))
    buckets = sorted({b for c in counts.values() for b in c})
    bottom = [0] * len(buckets)
    for version, c in sorted(counts.items()):
        ys = [c.get(b, 0) for b in buckets]
        ax1.bar(buckets, ys, bottom=bottom, width=0.9, label=f"forwarded {version}",
                color=colour(version))
        bottom = [a + y for a, y in zip(bottom, ys, strict=True)]
    for ax in (ax1, ax2):
        for m in marks:
            ax.axvline((m.event_time - t0) / BUCKET_MS, color=colour(m.version), linestyle="--",
                       linewidth=1, label=m.label if ax is ax1 else None)
    ax1.set_ylim(0, max(bottom, default=1) * 1.3)
    ax1.set_ylabel("windows forwarded per\nminute of event time")
    ax1.legend(loc="upper left", ncols=3, fontsize=8)
    ax1.set_title("cutover demo: two rollouts, by event time and by the version each window "
                  "came from")
    wm: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in raw:
        w = r.header("bg.watermark")
        if w is not None:
            wm[r.tag("bg.version")].append(((int(w) - t0) / BUCKET_MS, r.timestamp))
    start = min((ts for pts in wm.values() for _, ts in pts), default=0)
    for version, pts in sorted(wm.items()):
        pts.sort(key=lambda p: p[1])
        ax2.plot([x for x, _ in pts], [ts - start for _, ts in pts], ".", markersize=2,
                 color=colour(version), label=f"{version} watermark")
    ax2.set_xlabel("event time (minutes from the first window)")
    ax2.set_ylabel("wall clock (s) when the\nwatermark was emitted")
    ax2.legend(loc="upper left", ncols=3, fontsize=8)
    per_second: dict[str, Counter[int]] = defaultdict(Counter)
    for r in output:
        per_second[r.tag("bg.version")][int(r.timestamp - start)] += 1
    for version, c in sorted(per_second.items()):
        xs = sorted(c)
        ax3.plot(xs, [c[x] for x in xs], drawstyle="steps-mid", color=colour(version),
                 linewidth=1, label=f"{version} records/s")
    for i, (a, b) in enumerate(rollouts, start=1):
        ax3.axvspan(a - start, b - start, color="grey", alpha=0.15)
        ax3.text(a - start, ax3.get_ylim()[1] * 0.9, f" rollout {i}", fontsize=8)
    ax3.set_xlabel("wall clock (s)")
    ax3.set_ylabel("records written\nto the output per second")
    ax3.legend(loc="upper right", ncols=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
