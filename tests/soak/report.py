"""docs/soak.md: the soak's table, written from its results, never by hand.

Targets of a 30-minute run (issue 32): at least 20 faults, 0 lost, 0 duplicated, no output gap
over the input gap + 10 s, RSS flat (end within 15% of its value after the first fault). A
target that fails stays in the table, marked FAIL.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cutover.settings import DedupSettings
from tests.soak.chaos import ChaosResult, FaultOutcome
from tests.soak.cluster_faults import WHAT_IT_DOES, FaultKind
from tests.soak.router_workers import LIVENESS_FAILURE_S, STORE_CACHE_BYTES
from tests.soak.rss import END_WINDOW_S, RSS_TOLERANCE, WorkerRss, rss_flat

DOC = Path(__file__).resolve().parents[2] / "docs" / "soak.md"
MIN_FAULTS_PER_30_MIN = 20
GAP_ALLOWANCE_S = 10.0


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    measured: str
    passed: bool


def targets(r: ChaosResult) -> list[Target]:
    v = r.verdict
    want = int(MIN_FAULTS_PER_30_MIN * r.settings.minutes / 30)
    worst = max(r.faults, key=lambda f: f.gap.excess_s, default=None)
    flat = rss_flat(r.rss)
    judged = [x for x in r.rss if x.judged]
    return [
        Target(name=f"≥ {want} faults ({MIN_FAULTS_PER_30_MIN} per 30 min)",
               measured=str(len(r.faults)), passed=len(r.faults) >= want),
        Target(name="0 lost", measured=str(v.lost), passed=v.lost == 0),
        Target(name="0 duplicated", measured=str(v.duplicated), passed=v.duplicated == 0),
        Target(name="every record from the primary of its event time, in order at each "
                    "boundary",
               measured=f"{v.wrong_version} wrong version, {v.order_violations} out of order, "
                        f"{v.unexpected} unexpected",
               passed=not (v.wrong_version or v.order_violations or v.unexpected)),
        Target(name=f"no output gap over the input gap + {GAP_ALLOWANCE_S:g} s",
               measured="no fault" if worst is None else
               f"worst +{worst.gap.excess_s:.1f} s ({worst.fault.kind.value})",
               passed=worst is not None and worst.gap.excess_s <= GAP_ALLOWANCE_S),
        Target(name=f"RSS flat (end within {RSS_TOLERANCE:.0%} of after the first fault, a "
                    "minute after its last takeover and a full retention window)",
               measured="no process lived long enough to judge" if flat is None else
               ", ".join(f"{x.instance_id} {x.reference_mb} → {x.end_mb} MB" for x in judged),
               passed=bool(flat)),
    ]


def passed(r: ChaosResult) -> bool:
    return all(t.passed for t in targets(r))


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=DOC.parent).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def _machine() -> str:
    load = os.getloadavg()
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
            f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
            "(1 / 5 / 15 min)")


def _by_kind(r: ChaosResult) -> list[str]:
    rows = ["| fault | count | largest output gap (s) | input gap there (s) | "
            "worst excess (s) | within input + 10 s |", "|---|---:|---:|---:|---:|---|"]
    for kind in FaultKind:
        mine = [f for f in r.faults if f.fault.kind is kind]
        if not mine:
            rows.append(f"| {kind.value} | 0 | - | - | - | not hit |")
            continue
        big = max(mine, key=lambda f: f.gap.output_s)
        worst = max(f.gap.excess_s for f in mine)
        rows.append(f"| {kind.value} | {len(mine)} | {big.gap.output_s:.1f} | "
                    f"{big.gap.input_s:.1f} | {worst:+.1f} | "
                    f"{'PASS' if worst <= GAP_ALLOWANCE_S else 'FAIL'} |")
    return rows


def _fault_log(r: ChaosResult) -> list[str]:
    rows = ["| # | at (s) | fault | target | lasted (s) | worst partition | output gap (s) | "
            "input gap (s) | load | notes |", "|---:|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for i, f in enumerate(r.faults, 1):
        load = "-" if f.fault.load is None else f"{f.fault.load:.1f}"
        rows.append(f"| {i} | {f.fault.started - r.started:.0f} | {f.fault.kind.value} | "
                    f"{f.fault.target} | {f.fault.ended - f.fault.started:.0f} | "
                    f"{f.gap.partition} | {f.gap.output_s:.1f} | {f.gap.input_s:.1f} | "
                    f"{load} | {'; '.join(f.fault.notes) or ''} |")
    return rows


def render(r: ChaosResult, kafka: str) -> str:
    s, v = r.settings, r.verdict
    ts = targets(r)
    when = datetime.fromtimestamp(r.started, UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Chaos soak",
        "",
        "Generated by `make soak` (`python -m tests.soak`); do not edit by hand. What it runs "
        "and how it measures: `tests/soak/` (each module's docstring says its part).",
        "",
        f"- commit: {_commit()}",
        f"- date: {when}",
        f"- machine: {_machine()}",
        f"- broker: {kafka}, three nodes, broker defaults except replication 3 and "
        "min.insync.replicas 2",
        f"- duration: faults for {s.minutes:g} min; whole run {r.duration_s / 60:.1f} min",
        f"- seed: {s.seed} (`make soak SOAK_SEED={s.seed}` replays the same faults)",
        f"- route: {s.partitions} partitions, {s.workers} workers with instance ids, "
        f"{s.rate:g} events/s written by each of two versions, a switch every "
        f"{s.switch_every_s:g} s ({r.plans} plans), a fault every "
        f"{s.fault_every_s[0]:g}-{s.fault_every_s[1]:g} s (start to start)",
        f"- supervision: a worker that exits is started again, and so is one whose `/health` "
        f"has failed for {LIVENESS_FAILURE_S:g} s (a Kubernetes liveness probe, 10 s x 3); "
        "each restart is listed under *Notes*",
        "",
        "## Targets",
        "",
        "| target | measured | result |",
        "|---|---|---|",
        *(f"| {t.name} | {t.measured} | {'PASS' if t.passed else '**FAIL**'} |" for t in ts),
        "",
        f"**{'PASS' if all(t.passed for t in ts) else 'FAIL'}**",
        "",
        "## Faults by kind",
        "",
        "Output gap: the longest time a partition's output went without a record (read "
        "`read_committed`); input gap: the same for the broker's acknowledgements of that "
        "partition's input (the producers' own pause while leaders move). A fault owns the "
        "silences that begin from 10 s before its start to 10 s before the next fault's, each "
        "measured to the partition's next record, so a route that stopped is charged to the "
        "fault that stopped it. Per fault the partition whose output gap exceeds its input gap "
        "the most counts.",
        "",
        *_by_kind(r),
        "",
        "What each fault does:",
        "",
        *(f"- *{k.value}*: {WHAT_IT_DOES[k]}." for k in FaultKind),
        "",
        "## Records",
        "",
        "| events | expected on the output | forwarded | lost | duplicated | wrong version | "
        "out of order | unexpected |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r.events} | {v.expected} | {v.forwarded} | {v.lost} | {v.duplicated} | "
        f"{v.wrong_version} | {v.order_violations} | {v.unexpected} |",
        "",
        *([f"Pinned boundaries: {'; '.join(v.pinned)}.", ""] if v.pinned else []),
        *([f"Lost, first identities: {v.lost_samples}.", ""] if v.lost_samples else []),
        "## Worker memory (RSS, MB)",
        "",
        f"The workers run with store caches of {STORE_CACHE_BYTES >> 20} MiB "
        "(`store_memory.block_cache_bytes` and `write_buffer_bytes`) and a dedup retention of "
        f"{_retention(r)}: memory that fills a bounded cache, or holds a retention window, is "
        "not growth, so each process is judged from its first sample after the first fault, a "
        "minute of its life, a minute after it last took partitions over (memory held for "
        "more partitions is not growth) and one retention window of the run. *Stores*: what "
        "the block cache and the memtables held (`/metrics`), *partitions* the raw partitions "
        "it owned and *threads* the process's threads, at that point and at the end. *End*: "
        "the lowest sample of the process's last "
        f"{END_WINDOW_S:.0f} s, memory it holds rather than a recovery's passing peak (its very "
        "last sample in brackets when higher).",
        "",
        "| worker | pid | start | reference | end | stores | partitions | threads | "
        "judged over (s) | result |",
        "|---|---:|---:|---:|---:|---|---|---|---:|---|",
        *(f"| {x.instance_id} | {x.pid} | {x.start_mb} | {x.reference_mb or '-'} | "
          f"{x.end_mb}{_last(x)} | "
          f"{_stores(x.reference_stores_mb)} → {_stores(x.end_stores_mb)} | "
          f"{_stores(x.reference_partitions)} → {_stores(x.end_partitions)} | "
          f"{_stores(x.reference_threads)} → {_stores(x.end_threads)} | "
          f"{x.span_s:.0f} | {_rss_mark(x.judged, x.flat)} |" for x in r.rss),
        "",
        *_series(r),
        "## Every fault",
        "",
        "*load*: the machine's 1-minute load average when the fault started (2 cores: above 2, "
        "processes wait for a core, and every gap stretches).",
        "",
        *_fault_log(r),
        "",
    ]
    if r.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in r.notes), ""]
    return "\n".join(lines)


def _retention(r: ChaosResult) -> str:
    ms = r.settings.retention_ms or DedupSettings().retention_ms
    return f"{ms / 60_000:g} minutes"


SERIES_EVERY_S = 120.0


def _series(r: ChaosResult) -> list[str]:
    """Each judged process's memory over its life, a sample every ``SERIES_EVERY_S``: growth
    that goes on shows as a rising row, a window or a cache filling as a step that stops."""
    judged = {(x.instance_id, x.pid) for x in r.rss if x.judged}
    rows: list[str] = []
    for iid, pid in sorted(judged):
        samples = [x for x in r.rss_series if (x.instance_id, x.pid) == (iid, pid)]
        picked, next_at = [], -1.0
        for x in samples:
            if x.at >= next_at:
                picked.append(x)
                next_at = x.at + SERIES_EVERY_S
        rows.append(f"| {iid} | {pid} | " + ", ".join(
            f"{x.at / 60:.0f} min {x.rss_mb:.0f}" + (f" ({x.anon_mb:.0f})" if x.anon_mb else "")
            + (f" p{x.partitions}" if x.partitions is not None else "")
            for x in picked) + " |")
    if not rows:
        return []
    return [f"Memory of each judged process over the run, a sample every "
            f"{SERIES_EVERY_S / 60:g} minutes: minute of the run, RSS MB (of which anonymous), "
            "and *p* the partitions it owned.", "",
            "| worker | pid | samples |", "|---|---:|---|", *rows, ""]


def _stores(value: float | None) -> str:
    return "-" if value is None else f"{value}"


def _last(x: WorkerRss) -> str:
    return f" ({x.last_mb})" if x.last_mb is not None and x.last_mb > x.end_mb else ""


def _rss_mark(judged: bool, flat: bool) -> str:
    if not judged:
        return "not judged (too short)"
    return "PASS" if flat else "**FAIL**"


def write(r: ChaosResult, kafka: str, path: Path = DOC,
          say: Callable[[str], None] = print) -> None:
    path.write_text(render(r, kafka))
    say(f"wrote {path}")


def summary_line(f: FaultOutcome) -> str:
    return (f"{f.fault.kind.value}: output gap {f.gap.output_s:.1f} s on p{f.gap.partition} "
            f"(input {f.gap.input_s:.1f} s)")
