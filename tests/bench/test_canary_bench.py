"""What a per-key canary costs the router: the same data routed under a plan whose segment
gives green a canary share of the keys, and under the whole switch at the same boundary, in
alternating rounds; the figure is the median of the per-round ratios (canary / whole switch).
Under the canary every record of the segment needs its key's bucket (BLAKE2b-64 of the key,
router/native/_fastpath.c); the target is a cost under 5%. Run with `make bench`; prints the figures
and the machine's load."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from cutover.key_primary import Canary
from cutover.plan import Segment
from testground.brokers import create_topics
from tests.bench.report import load_line, record
from tests.bench.test_router_bench import (
    BASE_T,
    EVENTS,
    PARTITIONS,
    _fill,
    _router,
    whole_switch,
)

pytestmark = [pytest.mark.bench, pytest.mark.broker]

ROUNDS = 11   # its rounds spread about ±10%: a median of 5 could not resolve the 5% target
# the boundary early in the data, so that 90% of the records fall in the segment that differs
BOUNDARY = BASE_T + EVENTS
SHARE = 0.05


def canary() -> tuple[Segment, ...]:
    return (Segment(from_event_time=None, primary="blue"),
            Segment(from_event_time=BOUNDARY, primary="blue",
                    canary=Canary(version="green", share=SHARE)))


def test_a_canary_segment_costs_under_five_percent_of_a_whole_switch(
        bootstrap: str, tmp_path: Path) -> None:
    tag = f"canary-{int(time.time())}"
    raw, ctl, st = f"bench.raw-{tag}", f"ctl-{tag}", f"st-{tag}"
    create_topics(bootstrap, {raw: PARTITIONS, ctl: 1, st: 1})
    total = _fill(bootstrap, raw)
    plans = {"switch": whole_switch(BOUNDARY), "canary": canary()}
    warm = f"bench.out-{tag}-warm"   # the broker's first seconds of work are slower
    create_topics(bootstrap, {warm: PARTITIONS, f"{warm}.dlq": PARTITIONS})
    _router(bootstrap, raw, warm, ctl, st, total, tmp_path / "warm")
    rounds: list[tuple[float, float]] = []   # (whole switch, canary) records/s
    for r in range(ROUNDS):
        rates = {}
        for name in plans if r % 2 == 0 else reversed(plans):
            out = f"bench.out-{tag}-{name}-{r}"
            create_topics(bootstrap, {out: PARTITIONS, f"{out}.dlq": PARTITIONS})
            rates[name] = _router(bootstrap, raw, out, ctl, st, total,
                                  tmp_path / f"state-{name}-{r}", segments=plans[name]).per_s
            shutil.rmtree(tmp_path / f"state-{name}-{r}", ignore_errors=True)
        rounds.append((rates["switch"], rates["canary"]))
        print(f"\nround {r + 1}: whole switch {rates['switch']:,.0f} records/s, canary "
              f"{SHARE:.0%} {rates['canary']:,.0f} records/s = "
              f"{rates['canary'] / rates['switch']:.1%}", flush=True)
    ratios = sorted(c / s for s, c in rounds)
    median = ratios[len(ratios) // 2]
    switch, can = sorted(rounds, key=lambda x: x[1] / x[0])[len(rounds) // 2]
    print(f"\ncanary segment ({SHARE:.0%} of the keys): {can:,.0f} records/s, whole switch: "
          f"{switch:,.0f} records/s = {median:.1%} (cost {1 - median:.1%}; median of {ROUNDS} "
          f"alternating rounds: {', '.join(f'{c / s:.1%}' for s, c in rounds)}); "
          f"{load_line()}", flush=True)
    record("canary_cost", {"records": total, "partitions": PARTITIONS, "share": SHARE,
                           "switch_per_s": round(switch), "canary_per_s": round(can),
                           "ratio": round(median, 3),
                           "ratio_rounds": [round(c / s, 3) for s, c in rounds]})
    assert can > 0 and switch > 0
