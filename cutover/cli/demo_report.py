"""What ``cutover demo`` shows at the end: the output checked against a reference computed from
the input alone (lost, duplicated, wrong version, wrong value) for the timeline both rollouts
left on each partition, the output gaps of steady running and of each rollout, and a timeline
image (cutover.cli.demo_timeline).

Gaps are measured on the output records' timestamps (when the router wrote them), inside spans
the demo recorded: the steady spans, when one version ran alone and no rollout was under way,
and each rollout from its start to its end. A span with too few records to measure says so
rather than reporting zero.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cutover.cli.demo_parts import PARTITIONS
from cutover.cli.demo_timeline import Mark, draw_timeline
from cutover.cli.orders import Order
from cutover.control.routes import RouteView
from cutover.key_primary import in_canary
from cutover.rollout.journal import Phase, RolloutRecord

WINDOW_MS = 10_000
MIN_RECORDS = 5   # a span with fewer output records has no rhythm to measure
LOST_SHOWN = 20  # lost windows named in the summary


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


Span = tuple[float, float]


@dataclass
class Story:
    """What the demo did, on the wall clock: the spans it measures gaps in, and where green
    became primary on each partition."""

    steady: list[Span] = field(default_factory=list)
    rollouts: list[Span] = field(default_factory=list)
    first_bounds: dict[int, int] = field(default_factory=dict)


def read_all(bootstrap: str, topic: str) -> list[Rec]:
    from router.base.kafka_io import base_conf, read_to_end

    return [Rec(m.value(), {k: v.decode() for k, v in (m.headers() or []) if v is not None},
                m.timestamp()[1] / 1000)
            for m in read_to_end(base_conf(bootstrap), topic)]


def finals(records: list[RolloutRecord]) -> list[RolloutRecord]:
    """The last journal record of each rollout, in the order they ran."""
    last: dict[str, RolloutRecord] = {}
    for r in records:
        last[r.run_id] = r
    return list(last.values())


class Timeline:
    """Which version each window's event time belongs to, partition by partition."""

    def __init__(self, story: Story, rollouts: list[RolloutRecord], v: RouteView) -> None:
        first, second = rollouts[0], rollouts[1]
        self.new = second.spec.new
        self.to_green = {p: story.first_bounds.get(p, first.switch_boundary or 0)
                         for p in range(PARTITIONS)}
        self.to_new = second.switch_boundary
        self.back = {p: ps.boundary for p, (ps, *_) in v.partitions.items()
                     if ps.pinned and ps.boundary is not None} if self.to_new else {}
        # the first rollout's canary: green's share of the keys from its boundary on
        self.canary = next(((s.from_event_time, s.canary) for s in v.plan.segments
                            if s.canary is not None and s.from_event_time is not None),
                           None) if v.plan is not None else None

    def marks(self) -> list[Mark]:
        out = [Mark(self.canary[0], f"green takes {self.canary[1].share:.0%} of the keys",
                    "green")] if self.canary is not None else []
        out.append(Mark(min(self.to_green.values()), "green takes over", "green"))
        if self.to_new is not None:
            out.append(Mark(self.to_new, f"{self.new} takes over", self.new))
        if self.back:
            out.append(Mark(max(self.back.values()), "back to green", "green"))
        return out

    def version(self, p: int, end: int, key: bytes) -> str:
        if end < self.to_green[p]:
            if self.canary is not None and end >= self.canary[0] \
                    and in_canary(key, self.canary[1].buckets):
                return "green"
            return "blue"
        if self.to_new is None or end < self.to_new:
            return "green"
        back = self.back.get(p)
        return self.new if back is not None and end < back else "green"


def largest_gap(stamps: list[float], span: Span) -> float | None:
    inside = [s for s in stamps if span[0] <= s <= span[1]]
    if len(inside) < MIN_RECORDS:
        return None
    return max(b - a for a, b in itertools.pairwise(inside))


def lost_windows(missing: list[tuple[str, int]], expected: dict[tuple[str, int], str],
                 raw: list[Rec]) -> list[dict[str, Any]]:
    """The windows the output lacks, and what the raw topic holds of each: whether the version
    that owned its event time wrote it at all (a job that never emitted it) or the router did
    not forward it. One pass over the raw records for all of them."""
    from spark_tagger.partitioner import partition_for

    written: dict[tuple[str, int], set[str]] = {k: set() for k in missing}
    ends = {end for _, end in missing}
    for r in raw:
        t = r.header("bg.event_time")
        if r.header("bg.kind") == "heartbeat" or t is None or int(t) not in ends:
            continue
        k = (json.loads(r.value or b"null")["customer"], int(t))
        if k in written:
            written[k].add(r.tag("bg.version"))
    return [{"customer": c, "window_end": fmt(end), "event_time": end,
             "partition": partition_for(c.encode(), None, PARTITIONS),
             "expected_from": expected[(c, end)], "in_raw_from": sorted(written[(c, end)])}
            for c, end in missing]


def summarize(bootstrap: str, v: RouteView, journal: list[RolloutRecord], orders: list[Order],
              story: Story, out: Path, review_limit: float) -> dict[str, Any]:
    """Check the output against a reference computed from the input orders alone (green holds
    orders above ``review_limit`` back), print the summary, write ``summary.json`` and
    ``timeline.png`` into ``out``; return the summary."""
    from spark_tagger.partitioner import partition_for

    rollouts = finals(journal)
    raw = read_all(bootstrap, "demo.totals.raw")
    output = read_all(bootstrap, "demo.totals")
    dlq = read_all(bootstrap, "demo.totals.dlq")
    timeline = Timeline(story, rollouts, v)
    final_wm = {p: ps.watermarks for p, (ps, *_rest) in v.partitions.items()}

    # The reference, from the input alone: every window of every customer, as each version
    # counts it (green holds orders above the review limit back).
    ref: Counter[tuple[str, int]] = Counter()
    reviewed: Counter[tuple[str, int]] = Counter()
    for o in orders:
        window = (o.customer, o.ts // WINDOW_MS * WINDOW_MS + WINDOW_MS)
        ref[window] += 1
        reviewed[window] += o.amount <= review_limit

    def counted(version: str, k: tuple[str, int]) -> int:
        return reviewed[k] if version == "green" else ref[k]

    expected: dict[tuple[str, int], str] = {}
    for (cust, end), _n in ref.items():
        p = partition_for(cust.encode(), None, PARTITIONS)
        version = timeline.version(p, end, cust.encode())
        if end < final_wm[p].get(version, -1) and counted(version, (cust, end)):
            expected[(cust, end)] = version  # closed by that version's final watermark

    seen: Counter[tuple[str, int]] = Counter()
    wrong_version = wrong_value = 0
    by_version: Counter[str] = Counter()
    for r in output:
        body = json.loads(r.value or b"null")
        k = (body["customer"], int(r.tag("bg.event_time")))
        seen[k] += 1
        ver = r.tag("bg.version")
        by_version[ver] += 1
        if k in expected and expected[k] != ver:
            wrong_version += 1
        if body["orders"] != counted(ver, k):
            wrong_value += 1
    missing = sorted((k for k in expected if k not in seen), key=lambda k: (k[1], k[0]))
    lost = len(missing)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    raw_data = Counter(r.tag("bg.version") for r in raw if r.header("bg.kind") != "heartbeat")
    stamps = sorted(r.timestamp for r in output)
    steady = [largest_gap(stamps, s) for s in story.steady]
    during = [largest_gap(stamps, s) for s in story.rollouts]
    c = v.counters
    report = {
        "records_in": dict(raw_data), "forwarded": dict(by_version),
        "suppressed": c.suppressed, "duplicates_removed": c.duplicates,
        "dead_lettered": len(dlq), "expected": len(expected), "lost": lost,
        "duplicated": duplicated, "wrong_version": wrong_version, "wrong_value": wrong_value,
        "largest_gap_steady_s": steady, "largest_gap_rollouts_s": during,
        "rollouts": [{"to": r.spec.new, "phase": r.phase.value, "outcome": r.outcome,
                      "boundary": r.switch_boundary,
                      "compared": r.compare.counts.model_dump() if r.compare else None,
                      "phases": [[s.phase.value, round(s.seconds(s.ended_at or s.started_at), 1)]
                                 for s in r.phases]}
                     for r in rollouts],
        "green_from": timeline.to_green, "v3_from": timeline.to_new,
        "canary_from": timeline.canary[0] if timeline.canary else None,
        "canary_share": timeline.canary[1].share if timeline.canary else None,
        "green_again_from": timeline.back,
        "windows_with_a_reviewed_order": sum(1 for k in ref if reviewed[k] != ref[k]),
        "lost_windows": lost_windows(missing[:LOST_SHOWN], expected, raw),
        "windows": len(ref),
    }
    png = out / "timeline.png"
    draw_timeline(png, output, raw, timeline.marks(), story.rollouts)
    (out / "summary.json").write_text(json.dumps(report, indent=2, default=str))
    _print(report, rollouts, timeline, orders, c.duplicates, len(dlq), png, out)
    return report


def _seconds(gap: float | None) -> str:
    return "not measured (too few records)" if gap is None else f"{gap:.2f} s"


def _print(report: dict[str, Any], rollouts: list[RolloutRecord], timeline: Timeline,
           orders: list[Order], duplicates: int, dlq: int, png: Path, out: Path) -> None:
    print()
    print("summary")
    print(f"  input orders written        {len(orders)}")
    print(f"  raw records in (data)       {fmt_counts(report['records_in'])}")
    print(f"  forwarded per version       {fmt_counts(report['forwarded'])}")
    print(f"  suppressed (non-primary)    {fmt_counts(report['suppressed'])}")
    print(f"  duplicates removed          {duplicates}")
    print(f"  dead-lettered               {dlq}")
    for i, r in enumerate(rollouts, start=1):
        took = sum(s.seconds(s.ended_at or s.started_at) for s in r.phases)
        line = f"  rollout {i} to {r.spec.new:<14} {r.phase.value} after {took:.0f} s"
        if r.compare is not None:
            line += f"; compared first: {r.compare.headline()}"
        if r.phase is Phase.DONE:
            line += f"; {r.spec.new} primary from {fmt(r.switch_boundary)} (event time)"
        elif r.rollback is not None:
            line += f"; {r.rollback.reason[:120]}"
            if timeline.back:
                line += (f"; {r.spec.new} kept {fmt(r.switch_boundary)}.."
                         f"{fmt(max(timeline.back.values()))} (event time), "
                         f"restarted {r.rollback.restarts}x to emit it")
        print(line)
    print(f"  checked against reference   {report['expected']} windows expected: lost "
          f"{report['lost']}, duplicated {report['duplicated']}, wrong version "
          f"{report['wrong_version']}, wrong count {report['wrong_value']}")
    for w in report["lost_windows"]:
        found = ", ".join(w["in_raw_from"]) or "no version"
        print(f"    lost: {w['customer']}'s window ending {w['window_end']} (partition "
              f"{w['partition']}, {w['expected_from']}'s); the raw topic holds it from {found}")
    steady = ", ".join(_seconds(g) for g in report["largest_gap_steady_s"])
    during = ", ".join(f"rollout {i}: {_seconds(g)}"
                       for i, g in enumerate(report["largest_gap_rollouts_s"], start=1))
    print(f"  largest output gap          steady running (one version, no rollout): {steady}; "
          f"{during}")
    print(f"  timeline                    {png}")
    print(f"  summary, logs               {out / 'summary.json'}, {out / 'logs'}")
    print()
    print("what to look at")
    for line in lessons(report, rollouts):
        print(f"  {line}")


def lessons(report: dict[str, Any], rollouts: list[RolloutRecord]) -> list[str]:
    """What the two rollouts teach, from what happened in this run."""
    out: list[str] = []
    first = rollouts[0]
    if first.compare is not None:
        c = first.compare.counts
        keys = (f"gave green {first.spec.canary[0]:.0%} of the customers first and compared "
                "their windows" if first.spec.canary else
                "compared blue and green before switching")
        out.append(f"rollout 1 {keys}: {c.different} of "
                   f"{c.total} windows differ ({first.compare.diff_ratio:.1%}), within "
                   f"--max-diff {first.compare.max_diff:.0%}: the windows with an order above "
                   f"the review limit ({report['windows_with_a_reviewed_order']} of "
                   f"{report['windows']} in the whole run). The samples above show each one "
                   "field by field: check that every difference is one the change meant.")
    if len(rollouts) > 1 and rollouts[1].rollback is not None:
        r = rollouts[1]
        assert r.rollback is not None
        out.append(f"rollout 2 rolled back by itself ({r.rollback.trigger.value}): "
                   f"{r.rollback.reason[:160]}. `cutover rollout status --route {r.route}` "
                   "shows its phases; its log is under logs/rollout.")
    out.append(f"consumers saw every window once: lost {report['lost']}, duplicated "
               f"{report['duplicated']}, through both rollouts.")
    return out


def fmt_counts(c: Any) -> str:
    return ", ".join(f"{k}={n}" for k, n in sorted(dict(c).items())) or "0"
