"""docs/performance.md, generated: the current result of each benchmark, one table each.

``make bench`` runs the benchmarks, which write their sections to ``var/bench/results.json``
(tests/bench/report.py); then ``python -m tests.docs.performance_page --merge
var/bench/results.json`` stamps each new section with the commit and broker it ran on, keeps
it in ``docs/performance-results.json`` (the current results, one per benchmark, committed),
and renders the page from that file. Nothing else writes the page: a test renders it again
and compares. What was tried and measured along the way is in git log and
``docs/decisions/``; the page holds current results only.

    python -m tests.docs.performance_page [--merge var/bench/results.json] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "performance-results.json"
PAGE = REPO / "docs" / "performance.md"

Row = tuple[str, str]
Section = dict[str, Any]


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def _get(s: Section, key: str, fmt: Callable[[Any], str]) -> str | None:
    return fmt(s[key]) if s.get(key) is not None else None


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(head) - 1)
    return ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


def _pairs(rows: list[tuple[str, str | None]]) -> list[str]:
    return _table(("", "result"), [(k, v) for k, v in rows if v is not None])


def core(s: Section) -> list[str]:
    return _pairs([("routing rule + identity + RocksDB store, decisions/s",
                    _get(s, "decisions_per_s", _n)),
                   ("the same with full `bg.*` header parsing",
                    _get(s, "with_header_parsing_per_s", _n)),
                   ("the router's per-record path, headers included",
                    _get(s, "router_path_per_s", _n))])


def throughput(s: Section) -> list[str]:
    rounds = s.get("router_ratio_rounds")
    return _pairs([("router / pass-through loop, median of the rounds",
                    _get(s, "router_ratio", _pct)),
                   ("rounds", ", ".join(_pct(x) for x in rounds) if rounds else None),
                   ("pass-through loop, records/s", _get(s, "passthrough_per_s", _n)),
                   ("router, records/s", _get(s, "router_per_s", _n)),
                   ("bare Faust per-event agent / loop", _get(s, "faust_agent_ratio", _pct))])


def transactions(s: Section) -> list[str]:
    rounds = s.get("ratio_rounds")
    return _pairs([("transactions on / off, median of the rounds", _get(s, "ratio", _pct)),
                   ("rounds", ", ".join(_pct(x) for x in rounds) if rounds else None)])


def canary(s: Section) -> list[str]:
    rounds = s.get("ratio_rounds")
    ratio = s.get("ratio")
    return _pairs([
        ("canary segment / whole switch, median of the rounds", _get(s, "ratio", _pct)),
        ("cost of the key's bucket", _pct(1 - ratio) if ratio is not None else None),
        ("rounds", ", ".join(_pct(x) for x in rounds) if rounds else None),
        ("whole switch, records/s", _get(s, "switch_per_s", lambda x: f"{x:,}")),
        ("canary segment, records/s", _get(s, "canary_per_s", lambda x: f"{x:,}"))])


def latency(results: dict[str, Section]) -> list[str]:
    rows = []
    for key in ("latency_fetch_wait_default", "latency_fetch_wait_10"):
        s = results.get(key)
        if s is None:
            continue
        rows.append((f"{s['fetch_wait_max_ms']} ms", f"+{s['added_p50_ms']} ms",
                     f"+{s['added_p99_ms']} ms", _stamp(s)))
    return _table(("`fetch.wait.max.ms`", "added p50", "added p99", "measured"), rows)


def redeploy(s: Section) -> list[str]:
    return _pairs([("largest output gap, cutover", _get(s, "cutover_gap_s", lambda x: f"{x} s")),
                   ("largest output gap, stop-and-restart redeploy",
                    _get(s, "redeploy_gap_s", lambda x: f"{x} s")),
                   ("redeploy / cutover", _get(s, "ratio", lambda x: f"{x}x")),
                   ("largest gap in normal running", _get(s, "steady_largest_gap_s",
                                                          lambda x: f"{x} s")),
                   ("switch to CLEAR_TO_TEARDOWN", _get(s, "switch_to_clear_s",
                                                        lambda x: f"{x} s"))])


def dedup_scale(s: Section) -> list[str]:
    def cell(r: Section, key: str, fmt: Callable[[Any], str]) -> str:
        return fmt(r[key]) if r.get(key) is not None else "\u2013"
    rows = [(f"{r['identities']:,}", f"{r['filter_setting_mb']:.0f} MiB",
             cell(r, "rss_growth_mb", lambda x: f"+{x:.1f} MB"),
             cell(r, "rss_bytes_per_identity", lambda x: f"{x:.1f} B"),
             cell(r, "disk_mb", lambda x: f"{x:.1f} MB"),
             cell(r, "new_us_per_record", lambda x: f"{x:.2f} µs"),
             cell(r, "new_disk_read_share", lambda x: f"{x:.1%}"),
             cell(r, "open_s", lambda x: f"{x:.2f} s"),
             cell(r, "open_after_crash_s", lambda x: f"{x:.1f} s")) for r in s["rows"]]
    return _table(("identities in retention", "filter", "RSS growth", "per identity", "disk",
                   "new identity", "of which read RocksDB", "open", "open after a crash"), rows)


def failover(s: Section) -> list[str]:
    return _table(("set-up", "largest output gap", "lost", "duplicated"),
                  [(r["setup"], f"{r['gap_s']} s", str(r["lost"]), str(r["duplicated"]))
                   for r in s["results"]])


def held(s: Section) -> list[str]:
    b, u = s["bounded"], s["unbounded"]
    return _table(("", f"bounded (`max_held` {b['max_held']:,})", "unbounded"),
                  [("router RSS growth at its peak", f"+{b['rss_growth_mb']:,} MB",
                    f"+{u['rss_growth_mb']:,} MB"),
                   ("drain once the old version returns", f"{b['drain_s']} s",
                    f"{u['drain_s']} s")])


def two_workers(s: Section) -> list[str]:
    rounds = s.get("ratio_rounds")
    return _pairs([("one worker, raw records/s", _get(s, "one_per_s", _n)),
                   ("two workers, raw records/s", _get(s, "two_per_s", _n)),
                   ("two / one, median of the rounds", _get(s, "ratio", lambda x: f"{x}x")),
                   ("rounds", ", ".join(f"{x}x" for x in rounds) if rounds else None)])


def streams_anchor(s: Section) -> list[str]:
    """Router / Kafka Streams at each partition count, PASS at the goal (1.0x) or above."""
    goal = s.get("goal", 1.0)

    def ratio(x: float) -> str:
        return f"{x:.2f}x {'PASS' if x >= goal else 'FAIL'}"
    rows = [(str(r["partitions"]), _n(r["router_per_s"]), _n(r["streams_per_s"]),
             ratio(r["rate_ratio"]), f"{r['router_cpu_us']:.2f} µs",
             f"{r['streams_cpu_us']:.2f} µs", ratio(r["cpu_ratio"]),
             f"{r['router']['first_output_s']:.1f} s / {r['streams']['first_output_s']:.1f} s")
            for r in s["by_partitions"]]
    checked = ("Both outputs matched the reference: 0 lost, 0 duplicated." if s.get("checked")
               else "An output differed from the reference: see the run's log.")
    return [*_table(("partitions", "router, records/s", "Kafka Streams, records/s",
                     "router / Kafka Streams", "router, CPU per record",
                     "Kafka Streams, CPU per record", "records per CPU second, router / "
                     "Kafka Streams", "first output after start, router / Kafka Streams"),
                    rows), "", f"Goal: {goal:.1f}x or more. Medians of {s['rounds']} rounds of "
            f"{s['events']:,} events per version. {checked} Threads and peak RSS of each "
            "process (the median round): " + "; ".join(
                f"{r['partitions']} partitions: router {r['router']['threads']} threads, "
                f"{r['router']['peak_rss_mb']:,.0f} MB, Kafka Streams "
                f"{r['streams']['threads']} threads, {r['streams']['peak_rss_mb']:,.0f} MB"
                for r in s["by_partitions"]) + "."]


def _seconds(x: float) -> str:
    return f"{x:.1f} s"


def _figure(x: float, unit: str) -> str:
    """A target's figure in its unit: seconds and MB with decimals, counts without."""
    if unit == "%":
        return f"{x:.1f}%"
    return f"{x:,.2f} {unit}" if unit else f"{x:,.0f}"


def _limit(x: float, unit: str) -> str:
    return f"{x:g}%" if unit == "%" else f"{x:g} {unit}".rstrip()


def _marked(s: Section, row: Section, field: str, fmt: Callable[[Any], str]) -> str:
    """A row's figure, marked where it misses its target (the target in brackets)."""
    x = row.get(field)
    cell = "not measured" if x is None else fmt(x)
    for t in s.get("targets", []):
        if t["partitions"] == row["partitions"] and t["field"] == field and not t["passed"]:
            sign = "≤" if t["kind"] == "at most" else "≥"
            if field == "rate_per_s":   # the share of the rate at the fewest partitions
                share = ("not measured" if t["figure"] is None
                         else f"{t['figure']:.1f}% of the rate at "
                         f"{min(r['partitions'] for r in s['rows'])}")
                return f"{cell} **FAIL** ({share}, {sign} {t['limit']:g}%)"
            return f"{cell} **FAIL** ({sign} {_limit(t['limit'], t['unit'])})"
    return cell


def _sizing(rows: list[Section], checked: list[Section]) -> list[str]:
    """Partitions per worker and memory per partition, from the measured rows only."""
    sized = sorted((r for r in rows if r.get("rss_mb") is not None and r.get("threads")),
                   key=lambda r: r["partitions"])
    if len(sized) < 2:
        return []
    lo, hi = sized[0], sized[-1]
    span = hi["partitions"] - lo["partitions"]
    mb = (hi["rss_mb"] - lo["rss_mb"]) / span
    threads = (hi["threads"] - lo["threads"]) / span
    # each row against the limits the targets set (start-up, failover, threads, RSS, none
    # lost), whichever partition count a target names
    limits = {t["field"]: (t["kind"], t["limit"]) for t in checked if t["field"] != "rate_per_s"}

    def within(r: Section) -> bool:
        for field, (kind, limit) in limits.items():
            x = r[field] if field != "lost" else r["lost"] + r["duplicated"] + r["wrong_version"]
            if x is None or (x > limit if kind == "at most" else x < limit):
                return False
        return True

    meets = [r["partitions"] for r in sized if within(r)]
    out = ["", "### Sizing", "",
           "From the rows above, with default settings. A worker's memory is set per worker, "
           "not per partition: its dedup stores share `store_memory.block_cache_bytes`, "
           "`store_memory.write_buffer_bytes` and `store_memory.filter_bytes`, and its data "
           "consumer prefetches up to `queued.max.messages.kbytes` plus one fetch of "
           "`fetch.max.bytes` (`kafka:` settings); what grows with the partitions is each "
           "store's open RocksDB and its empty memtable (see "
           "[configuration.md](configuration.md)):", "",
           f"- memory per owned partition: {mb:.1f} MB of peak RSS (from {lo['rss_mb']:.0f} MB "
           f"at {lo['partitions']} partitions to {hi['rss_mb']:.0f} MB at "
           f"{hi['partitions']});",
           f"- threads per owned partition: {threads:.1f} (from {lo['threads']} to "
           f"{hi['threads']});"]
    if meets:
        out.append(f"- partitions per worker: up to {max(meets)}, the largest count measured "
                   "at which the worker's start-up, failover, threads and memory were within "
                   "the targets and nothing was lost.")
    else:
        out.append("- partitions per worker: at no count measured were the worker's start-up, "
                   "failover, threads and memory all within the targets; see the marked "
                   "cells.")
    return out


def _partition_row(s: Section, r: Section) -> tuple[str, ...]:
    routes = r["routes"]
    label = str(r["partitions"]) + (
        f" ({routes} routes x {r['partitions'] // routes})" if routes > 1 else "")
    every = r["every_partition_output_s"]
    wrong = f"{r['lost']} / {r['duplicated']} / {r['wrong_version']}"
    return (label, _marked(s, r, "first_output_s", _seconds),
            "not measured" if every is None else _seconds(every),
            _marked(s, r, "rate_per_s", _n), _marked(s, r, "failover_same_id_s", _seconds),
            _marked(s, r, "failover_standby_s", _seconds), _marked(s, r, "threads", str),
            _marked(s, r, "rss_mb", lambda x: f"{x:,.0f} MB"),
            _marked(s, r, "lost", lambda _x: wrong))


SCALE_COUNTS = (4, 64, 256)   # the partition counts `make bench` runs


def _rate_rounds(rounds: list[Section]) -> list[str]:
    """The rate share round by round, as the target takes their median, and the pass-through
    loop's share on the same backlogs where it was measured."""
    if len(rounds) < 2:
        return []
    lo, hi = rounds[0]["low_partitions"], rounds[0]["high_partitions"]

    def one(r: Section, key: str = "share", order: bool = True) -> str:
        share = "not measured" if r.get(key) is None else f"{r[key]:.1%}"
        first = hi if r["high_first"] else lo
        return f"{share} ({first} first)" if order else share

    shares = sorted(r["share"] for r in rounds if r["share"] is not None)
    median = (f"; their median, {statistics.median(shares):.1%}, is the figure of the target"
              if len(shares) == len(rounds) else "; a round without a rate fails the target")
    # results of before the loop was measured took the table's rates as the first round
    first = "" if "loop_share" in rounds[0] else " (the first round is the table's)"
    lines = ["", f"Routing rate at {hi} / at {lo} partitions in {len(rounds)} rounds, each a "
             "fresh backlog routed by a fresh worker at both counts, the order alternating"
             f"{first}: {', '.join(one(r) for r in rounds)}{median}."]
    loops = sorted(r["loop_share"] for r in rounds if r.get("loop_share") is not None)
    if len(loops) == len(rounds):
        lines += ["", f"The pass-through loop (no routing, no transactions) read each backlog "
                  f"just before the worker: its rate at {hi} / at {lo} partitions was "
                  f"{', '.join(one(r, 'loop_share', False) for r in rounds)}, a median of "
                  f"{statistics.median(loops):.1%}. That part of a drop is the client's and the "
                  "broker's at that count, not the router's."]
    return lines


def partition_counts(s: Section) -> list[str]:
    rows: list[Section] = sorted(s["rows"], key=lambda r: r["partitions"])
    checked: list[Section] = s.get("targets", [])

    out = [f"{s['raw_records']:,} raw data records ({s['events']:,} events) at every count, "
           "plus the tagger's heartbeats on every partition; failover with "
           f"{s['live_rate']:,} events/s flowing.", "",
           *_table(("partitions", "first output after start", "output on every partition",
                    "routing rate, raw data records/s", "failover, same instance id",
                    "failover, standby", "threads", "peak RSS",
                    "lost / duplicated / wrong version"),
                   [_partition_row(s, r) for r in rows])]
    out += _rate_rounds(s.get("rate_rounds", []))
    missing = [n for n in SCALE_COUNTS if n not in {r["partitions"] for r in rows}]
    if missing:
        out += ["", f"Not measured in this run: {', '.join(map(str, missing))} partitions; "
                "the targets set there are checked at the largest count measured."]
    if checked:
        out += ["", *_table(("target", "figure", "target", "figure / target", ""),
                            [(t["name"], "not measured" if t["figure"] is None
                              else _figure(t["figure"], t["unit"]),
                              f"{t['kind']} {_limit(t['limit'], t['unit'])}",
                              "" if t["ratio"] is None else f"{t['ratio']:.3f}",
                              "PASS" if t["passed"] else "**FAIL**") for t in checked])]
    return out + _sizing(rows, checked)


# (section key, title, what it measures, table)
BENCHMARKS: list[tuple[str, str, str, Callable[[Section], list[str]]]] = [
    ("core_decisions", "Decision core", "`tests/bench/test_core_bench.py`: one core, 1,000,000 "
     "synthetic records (both versions, ~10% replays, a switch in the middle, heartbeats as the "
     "tagger writes them), the RocksDB store flushed every 10,000 records.", core),
    ("router_throughput", "Router throughput", "`tests/bench/test_router_bench.py`: 200,000 "
     "tagged records on 4 partitions; the router (routing, dedup, checkpoints, transactions) "
     "and a confluent-kafka pass-through loop that only forwards, in alternating rounds on the "
     "same data.", throughput),
    ("router_throughput_64", "Router throughput at 64 partitions", "`tests/bench/"
     "test_router_bench.py::test_router_vs_passthrough_at_64_partitions`: 1,000,000 tagged "
     "records of the same shape on 64 partitions, the router against the pass-through loop in "
     "alternating rounds. Target: 100% or more.", throughput),
    ("router_transactions", "Transactions on vs off", "`tests/bench/test_router_bench.py::"
     "test_router_transactions_cost`: the same data routed with `transactions: on` and `off`, "
     "alternating rounds.", transactions),
    ("canary_cost", "A canary segment", "`tests/bench/test_canary_bench.py`: the data of "
     "the router throughput benchmark routed under a plan whose segment gives green 5% of the "
     "keys, and under the whole switch at the same boundary (90% of the records past it), in "
     "alternating rounds; under the canary each record of the segment needs its key's bucket "
     "(BLAKE2b-64 of the key, in the compiled path). Target: under 5%.", canary),
    ("latency", "Latency the router adds", "`tests/bench/test_latency_bench.py`: 2,000 records/s "
     "for 20 s on 4 partitions, read by the router and by the pass-through loop at once; the "
     "figure is the router's latency less the loop's.", lambda s: []),
    ("redeploy_gap", "Output gap: cutover vs stop-and-restart", "`tests/bench/"
     "test_redeploy_gap_bench.py`: a real PySpark job at 50 orders/s, switched by cutover, "
     "then redeployed by stopping and restarting it on its checkpoint.", redeploy),
    ("dedup_store_scale", "Dedup store at scale", "`tests/bench/test_dedup_scale_bench.py`: "
     "one partition's store at 1M and 10M identities in retention (50M with "
     "`CUTOVER_BENCH_DEDUP_MAX=50000000`); memory is set by the settings, not by the "
     "identities.", dedup_scale),
    ("failover_gap", "Router failover", "`tests/bench/test_failover_bench.py`: 1,000 records/s "
     "on 4 partitions, a worker killed with `kill -9`; the largest arrival gap on an output "
     "partition for a `read_committed` consumer.", failover),
    ("held_bound", "Held records under a stalled old version", "`tests/bench/"
     "test_held_bound_bench.py`: the old version silent after the switch while the new one "
     "writes 1,000,000 records on 4 partitions.", held),
    ("two_workers", "Two workers on one route", "`tests/bench/test_two_workers_bench.py`: one "
     "route on 4 partitions, one worker process against two in one group, alternating rounds, "
     "on two cores shared with the broker.", two_workers),
    ("streams_anchor", "Against Kafka Streams", "`tests/bench/test_streams_anchor_bench.py`: "
     "the router's job as a Kafka Streams application (`jvm/streams-router`, "
     "`exactly_once_v2`, one stream thread; the boundary fixed, dedup by the same identity in a "
     "window store with the same retention) against one router worker (default settings, "
     "transactions on), on one broker, the same tagged backlog (both versions, heartbeats, "
     "every tenth micro-batch replayed, a switch in the middle), alternating rounds. Each is "
     "its own process: raw records per second from its first output record to its last as a "
     "`read_committed` consumer sees them, and its process's CPU time (utime + stime) per raw "
     "record over that span.", streams_anchor),
    ("partition_counts", "Partition counts", "`tests/bench/test_partition_counts_bench.py`: one "
     "worker with default settings over a route of 4, 64 and 256 partitions (256 as 4 routes of "
     "64), the same tagged backlog at every count (both versions, replays, one switch); start "
     "to first output, the routing rate from first output to last, failover of every partition "
     "after `kill -9` (restarted with the same instance id: from the restart; a standby worker: "
     "from the kill) until output of records written after it on every partition, the worker's "
     "threads and peak RSS, and the output checked with `read_committed`. A cell that misses "
     "its target is marked (start-up and failover targets are set at 64 and 256 partitions, "
     "threads and memory at 256, the rate at 64 against the rate at 4 as the median of rounds "
     "that route a fresh backlog at both counts, the order alternating). The broker removes a "
     "deleted topic's files at once during the run (`log.segment.delete.delay.ms` 0, its "
     "default given back after): with the default 60 s, an earlier count's files were removed "
     "in the middle of a later count's routing.", partition_counts),
]


def _stamp(s: Section) -> str:
    load = s.get("load_average") or []
    under = " (under load)" if load and load[0] > s.get("cpus", 2) else ""
    where = f"{s['commit']}, " if s.get("commit") else ""
    return (f"{where}{s['measured_at'][:10]}, {s.get('broker', 'broker not recorded')}"
            + (f", load {load[0]}{under}" if load else ""))


def render(data: dict[str, Any]) -> str:
    m, results = data["machine"], data["sections"]
    out = ["# Performance", "",
           "<!-- generated by `make bench` (tests/docs/performance_page.py) from "
           "docs/performance-results.json; do not edit by hand -->", "",
           "The current result of each benchmark, with the commit, date, broker and load it was "
           "measured at. `make bench` runs them all and regenerates this page; a benchmark "
           "asserts only what makes its figure valid (every record arrived, none lost or "
           "duplicated), never a speed. Ratios are taken within one run (same broker, same "
           "data, same moment) and hold up better than absolute figures; re-run `make bench` "
           "on your own machine before quoting any of them. Why the design is as it is: "
           "[design.md](design.md) and [decisions/](decisions/).", "",
           "## The machine", "", *_table(("", ""), [(k, str(v)) for k, v in m.items()])]
    for key, title, what, table in BENCHMARKS:
        out += ["", f"## {title}", "", what, ""]
        if key == "latency":
            rows = latency(results)
            out += rows if len(rows) > 2 else ["No result recorded yet: run `make bench`."]
            continue
        s = results.get(key)
        if s is None:
            out.append("No result recorded yet: run `make bench`.")
            continue
        out += [f"Measured: {_stamp(s)}.", "", *table(s)]
    return "\n".join(out) + "\n"


def merge(data: dict[str, Any], fresh: dict[str, Section], commit: str,
          broker: str) -> dict[str, Any]:
    """Each section measured after the one kept replaces it, stamped with where it ran (the
    results file keeps every benchmark's last run, so a section is new only once)."""
    sections = dict(data["sections"])
    for key, s in fresh.items():
        kept = sections.get(key)
        if kept is None or s["measured_at"] > kept["measured_at"]:
            sections[key] = {**s, "commit": commit, "broker": broker}
    return {**data, "sections": sections}


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--merge", type=Path, help="a results file `make bench` wrote")
    p.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = p.parse_args(argv)
    data = json.loads(RESULTS.read_text())
    if args.merge is not None and args.merge.exists():
        broker = {"tansu": "Tansu (embedded)"}.get(os.environ.get("CUTOVER_TEST_BROKER", ""),
                                                   "Apache Kafka")
        data = merge(data, json.loads(args.merge.read_text()), _commit(), broker)
        RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    page = render(data)
    if args.check:
        if PAGE.read_text() != page:
            print("docs/performance.md is out of date: run python -m tests.docs.performance_page",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
