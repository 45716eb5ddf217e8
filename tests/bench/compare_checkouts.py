"""The router's throughput and CPU per record in two or more checkouts of the project, side by
side on one broker and one raw topic: how a change to the data path is measured before and
after (``git worktree add /tmp/before <commit>``).

Each round runs, for every checkout in turn (the order alternates between rounds), the
pass-through loop and the router over the same 200,800 raw records of the router benchmark,
each in a process of its own with that checkout first on ``PYTHONPATH``
(:mod:`tests.bench.checkout_round`). It prints each round and the medians: records/s, the
router's share of the pass-through loop's records/s, and CPU microseconds per raw record,
which is the figure to trust on a loaded machine.

Usage: python -m tests.bench.compare_checkouts NAME=DIR [NAME=DIR ...]  (ROUNDS=4 by default)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from cutover.plan import CutoverPlan, Segment
from testground.brokers import broker_for_tests, create_topics
from tests.bench.report import load_line
from tests.bench.test_router_bench import BASE_T, EVENTS, PARTITIONS, _fill

MODES = ("passthrough", "router")
# Run as a script, so that the checkout on PYTHONPATH (not this one) provides every import.
ROUND = Path(__file__).with_name("checkout_round.py")


@dataclass(frozen=True)
class Round:
    per_s: float
    cpu_us: float


def _round(checkout: str, mode: str, bootstrap: str, raw: str, out: str, total: int) -> Round:
    with tempfile.TemporaryDirectory(prefix="cutover-ab-") as state:
        done = subprocess.run(
            [sys.executable, str(ROUND), mode, bootstrap, raw, out,
             "ab.control", "ab.status", str(total), state],
            cwd=checkout, env={**os.environ, "PYTHONPATH": checkout},
            capture_output=True, text=True, timeout=900)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{checkout} {mode} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    d = json.loads(lines[-1])
    return Round(per_s=d["per_s"], cpu_us=d["cpu_us"])


def main(argv: list[str]) -> None:
    if not argv or any("=" not in a for a in argv):
        raise SystemExit(__doc__)
    checkouts = dict(a.split("=", 1) for a in argv)
    rounds = int(os.environ.get("ROUNDS", "4"))
    with broker_for_tests() as broker:
        bs = broker.bootstrap
        create_topics(bs, {"ab.raw": PARTITIONS, "ab.control": 1, "ab.status": 1})
        total = _fill(bs, "ab.raw")
        plan = CutoverPlan(route="bench", epoch=1, segments=(
            Segment(from_event_time=None, primary="blue"),
            Segment(from_event_time=BASE_T + EVENTS * 5, primary="green")))
        p = Producer({"bootstrap.servers": bs})
        p.produce("ab.control", plan.to_json(), b"bench")
        p.flush(10)
        results: dict[tuple[str, str], list[Round]] = {(n, m): [] for n in checkouts
                                                        for m in MODES}
        for r in range(rounds):
            names = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
            for name in names:
                for mode in MODES:
                    got = _round(checkouts[name], mode, bs, "ab.raw", f"ab.{name}.{mode}.{r}",
                                 total)
                    results[(name, mode)].append(got)
                    print(f"round {r + 1} {name:>10} {mode:>11} {got.per_s:>9,.0f} records/s "
                          f"{got.cpu_us:6.2f} us CPU per record; {load_line()}", flush=True)
    print(f"\nmedians of {rounds} rounds, {total:,} raw records")
    for name in checkouts:
        pt, ro = results[(name, "passthrough")], results[(name, "router")]
        share = statistics.median(b.per_s / a.per_s for a, b in zip(pt, ro, strict=True))
        pt_cpu = statistics.median(x.cpu_us for x in pt)
        ro_cpu = statistics.median(x.cpu_us for x in ro)
        print(f"{name:>10}: pass-through {statistics.median(x.per_s for x in pt):>9,.0f}/s "
              f"{pt_cpu:5.2f} us; router {statistics.median(x.per_s for x in ro):>9,.0f}/s "
              f"{ro_cpu:5.2f} us; router/pass-through records/s {share:.0%}, "
              f"CPU per record {ro_cpu / pt_cpu:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
