"""Router throughput vs a confluent-kafka pass-through loop vs a bare Faust agent, on the same
broker and data. Run with `make bench` (pytest -m bench -s tests/bench); prints the figures."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cutover.headers import TaggedRecord, heartbeat_headers
from cutover.plan import CutoverPlan, Segment
from cutover.settings import RouterSettings, parse_settings
from router.native import compiled
from router.worker.datapath import DataPath
from router.worker.gc_pause import batch_gc_pause
from testground.brokers import BrokerUnderTest, create_topics
from tests.bench.passthrough import (
    OUTPUT_PRODUCER,
    Measured,
    assigned_consumer,
    forward_primary,
    passthrough_measured,
)
from tests.bench.report import load_line, record
from tests.bench.router_clock import RouterClock

pytestmark = [pytest.mark.bench, pytest.mark.broker]

EVENTS = 100_000          # each emitted by blue and green: 200,000 raw records
PARTITIONS = 4
BASE_T = 1_767_225_600_000


ROUNDS = 5
TXN_ROUNDS = 5
MANY = 64                # partitions of the production-count run
MANY_ROUNDS = 5
MANY_EVENTS = 500_000    # 1M raw records: a run long enough at 64 partitions
BATCH = 1000             # events per emulated micro-batch, each followed by heartbeats


def _fill(bootstrap: str, topic: str, events: int = EVENTS,
          partitions: int = PARTITIONS) -> int:
    """What the tagger writes: each version's micro-batches of data, each batch followed by a
    heartbeat on every partition (the router's watermarks come from those)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                  "queue.buffering.max.messages": 2_000_000, "batch.num.messages": 10000})
    n = 0

    def send(value: bytes, key: bytes | None, partition: int, hdrs: list) -> None:
        while True:
            try:
                p.produce(topic, value, key, partition=partition, headers=hdrs)
                return
            except BufferError:
                p.poll(0.05)

    for i in range(events):
        t = BASE_T + i * 10
        batch = i // BATCH
        for v in ("blue", "green"):
            hdrs = TaggedRecord(version=v, event_time=t, watermark=t - 1000,
                                batch=batch).to_headers()
            value = b'{"order": %d, "amount": %d, "by": "%s"}' % (i, i % 997, v.encode())
            send(value, b"k%d" % i, i % partitions, hdrs)
            n += 1
            if (i + 1) % BATCH == 0:
                beat = heartbeat_headers(v, t - 1000, batch)
                for part in range(partitions):
                    send(b"", None, part, beat)
                    n += 1
    p.flush(60)
    return n


def _txn_floor(bootstrap: str, raw: str, out: str, total: int) -> Measured:
    """The least a transactional router does on this data, and nothing else: the pass-through
    loop, but it forwards only one version's records (half of them, as the router does) through
    one transactional producer per partition and commits each partition's transaction per
    batch (router.durability.transactions' shape, without checkpoints, dedup, checks or a plan). Its
    records/s over the pass-through loop's is the ceiling of the router's figure here. Its
    batches are the router's (the ``batch_records`` setting's default), as its transactions
    are."""
    batch = RouterSettings.model_fields["batch_records"].default
    c = assigned_consumer(bootstrap, raw, f"floor-{out}", PARTITIONS)
    producers = []
    for p in range(PARTITIONS):
        pr = Producer({"bootstrap.servers": bootstrap, **OUTPUT_PRODUCER,
                       "transactional.id": f"{out}.{p}", "acks": "all"})
        pr.init_transactions(30)
        producers.append(pr)
    n = 0
    t0 = c0 = None
    while n < total:
        msgs = c.consume(batch, 0.05)
        if msgs and t0 is None:
            t0, c0 = time.monotonic(), time.process_time()
        with batch_gc_pause():
            if msgs:
                for pr in producers:
                    pr.begin_transaction()
                n += forward_primary(producers, out, msgs, b"blue")
                for pr in producers:
                    pr.commit_transaction(30)
                c.commit(asynchronous=True)
            del msgs
    assert t0 is not None and c0 is not None
    done = Measured(total / (time.monotonic() - t0), (time.process_time() - c0) / total * 1e6)
    c.close()
    return done


def whole_switch(boundary: int = BASE_T + EVENTS * 5) -> tuple[Segment, ...]:
    """The bench's plan: blue, then green for every key from ``boundary`` on."""
    return (Segment(from_event_time=None, primary="blue"),
            Segment(from_event_time=boundary, primary="green"))


def _router(bootstrap: str, raw: str, out: str, control: str, status: str, total: int,
            state: Path, transactions: str = "auto", compiled_path: bool = True,
            segments: tuple[Segment, ...] | None = None, events: int = EVENTS) -> Measured:
    """The router's run; ``compiled_path`` False: the interpreted per-record loop
    (router.native.compiled); ``segments``: the plan's timeline (default :func:`whole_switch`)."""
    settings = parse_settings({
        "bootstrap": bootstrap, "control_topic": control, "status_topic": status,
        "group_id": f"bench-{out}", "state_dir": str(state), "http_port": None,
        "kafka": {"session.timeout.ms": 6000}, "transactions": transactions,
        "routes": [{"name": "bench", "inputs": [raw], "output": out}]})
    plan = CutoverPlan(route="bench", epoch=1, segments=segments or whole_switch())
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(control, plan.to_json(), b"bench")
    p.flush(10)
    was = os.environ.get(compiled.ENV)
    os.environ[compiled.ENV] = "1" if compiled_path else "0"
    try:
        engine = DataPath(settings, "bench")  # picks its per-record path here
    finally:
        if was is None:
            del os.environ[compiled.ENV]
        else:
            os.environ[compiled.ENV] = was
    def decided() -> int:
        s = 0
        for o in list(engine.owned.values()):
            c = o.router.counters
            s += c.forwarded + c.duplicates + c.dead_lettered + sum(c.suppressed.values())
        return s

    # from the first consumed records until every data record is decided (heartbeats are not
    # decisions) and that batch is durable
    clock = RouterClock(engine, decided, 2 * events)
    th = threading.Thread(target=engine.run, daemon=True)
    th.start()
    t0, c0 = clock.started()
    t1, c1 = clock.durable()
    done = Measured(total / (t1 - t0), (c1 - c0) / total * 1e6)
    forwarded = sum(o.router.counters.forwarded for o in engine.owned.values())
    engine.stop()
    th.join(30)
    assert forwarded == events
    return done


@dataclass(frozen=True)
class Medians:
    """Alternating rounds of (pass-through loop, router), summed up: each round's router /
    loop ratio of records/s and of CPU per record, and the records/s of the median round."""

    ratios: list[float]
    cpu: list[float]
    passthrough_per_s: float
    router_per_s: float


def _medians(rounds: list[tuple[Measured, Measured]]) -> Medians:
    pt, router = sorted(rounds, key=lambda x: x[1].per_s / x[0].per_s)[len(rounds) // 2]
    return Medians([b.per_s / a.per_s for a, b in rounds],
                   [b.cpu_us / a.cpu_us for a, b in rounds], pt.per_s, router.per_s)


def _faust_agent(bootstrap: str, raw: str, out: str, count: int, datadir: Path) -> float:
    script = Path(__file__).with_name("router_faust_agent.py")
    res = subprocess.run([sys.executable, str(script), bootstrap, raw, out, str(count),
                          str(datadir)],
                         capture_output=True, text=True, timeout=300)
    found = re.search(r"records_per_s=(\d+)", res.stdout + res.stderr)  # Faust logs stdout
    if found:
        return float(found.group(1))
    raise AssertionError(f"faust agent printed no figure:\n{res.stdout[-2000:]}"
                         f"{res.stderr[-3000:]}")


def test_router_vs_passthrough(bootstrap: str, tmp_path: Path) -> None:
    raw, out_pt, out_r, out_f = "bench.raw", "bench.out-pt", "bench.out-router", "bench.out-f"
    tag = str(int(time.time()))
    raw, out_pt, out_r, out_f = (f"{t}-{tag}" for t in (raw, out_pt, out_r, out_f))
    create_topics(bootstrap, {raw: PARTITIONS, out_f: PARTITIONS,
                              f"ctl-{tag}": 1, f"st-{tag}": 1})
    total = _fill(bootstrap, raw)
    # Alternate rounds on the same data: one run varies by +-15% on a shared 2-core machine,
    # so the figure is the median of the per-round ratios.
    # A round of each not counted: the broker speeds up over its first seconds of work (its
    # JIT), which favoured whoever ran later in the first rounds; and the router's requests
    # (transactions, their markers, ListOffsets) take code paths the pass-through loop never
    # warms (measured: the router's first runs cost the broker 3-4.5 us of CPU per raw record,
    # its later ones 1.8-2.4)
    warm = f"{out_r}-warm"
    create_topics(bootstrap, {f"{out_pt}-warm": PARTITIONS, warm: PARTITIONS,
                              f"{warm}.dlq": PARTITIONS})
    passthrough_measured(bootstrap, raw, f"{out_pt}-warm", total, PARTITIONS)
    _router(bootstrap, raw, warm, f"ctl-{tag}", f"st-{tag}", total, tmp_path / "state-warm")
    shutil.rmtree(tmp_path / "state-warm", ignore_errors=True)
    rounds: list[tuple[Measured, Measured]] = []   # (pass-through loop, router)
    interpreted: list[float] = []   # router / pass-through, the interpreted per-record loop
    floor: list[float] = []         # transactional floor / pass-through
    for r in range(ROUNDS):
        o_pt, o_r, o_i = f"{out_pt}-{r}", f"{out_r}-{r}", f"{out_r}-i{r}"
        o_f = f"{out_pt}-floor{r}"
        create_topics(bootstrap, {o_pt: PARTITIONS, o_r: PARTITIONS, f"{o_r}.dlq": PARTITIONS,
                                  o_i: PARTITIONS, f"{o_i}.dlq": PARTITIONS, o_f: PARTITIONS})
        runs: dict[str, Callable[[], Measured]] = {
            "pt": partial(passthrough_measured, bootstrap, raw, o_pt, total, PARTITIONS),
            "floor": partial(_txn_floor, bootstrap, raw, o_f, total),
            "router": partial(_router, bootstrap, raw, o_r, f"ctl-{tag}", f"st-{tag}", total,
                              tmp_path / f"state-{r}"),
            "interp": partial(_router, bootstrap, raw, o_i, f"ctl-{tag}", f"st-{tag}", total,
                              tmp_path / f"state-i{r}", compiled_path=False)}
        # the order alternates: the broker warms up over the run, which favours who goes last
        got = {name: runs[name]() for name in (runs if r % 2 == 0 else reversed(runs))}
        pt_r, router_r, interp_r = got["pt"], got["router"], got["interp"]
        floor_r = got["floor"].per_s
        floor.append(floor_r / pt_r.per_s)
        for d in (f"state-{r}", f"state-i{r}"):
            shutil.rmtree(tmp_path / d, ignore_errors=True)
        rounds.append((pt_r, router_r))
        interpreted.append(interp_r.per_s / pt_r.per_s)
        print(f"\nround {r + 1}: confluent pass-through loop {pt_r.per_s:,.0f} records/s "
              f"({pt_r.cpu_us:.2f} us CPU per record), router {router_r.per_s:,.0f} records/s "
              f"({router_r.cpu_us:.2f} us) = {router_r.per_s / pt_r.per_s:.0%}; interpreted "
              f"per-record loop {interp_r.per_s:,.0f} records/s = "
              f"{interp_r.per_s / pt_r.per_s:.0%}; transactional floor {floor_r:,.0f} "
              f"records/s = {floor_r / pt_r.per_s:.0%}", flush=True)
    m = _medians(rounds)
    ratios, cpu, pt, router = m.ratios, m.cpu, m.passthrough_per_s, m.router_per_s
    print(f"\nconfluent pass-through loop: {pt:,.0f} records/s (median round)")
    print(f"router (route + dedup + checkpoint): {router:,.0f} records/s "
          f"= {router / pt:.0%} of pass-through (median of {ROUNDS} rounds: "
          f"{', '.join(f'{x:.0%}' for x in ratios)}); CPU per raw record "
          f"{statistics.median(cpu):.2f}x the loop's (rounds {', '.join(f'{x:.2f}' for x in cpu)}"
          f"); with the interpreted per-record loop {statistics.median(interpreted):.0%} (rounds "
          f"{', '.join(f'{x:.0%}' for x in interpreted)}); the transactional floor (half the "
          f"records, one transaction per partition and batch, nothing else) "
          f"{statistics.median(floor):.0%} (rounds {', '.join(f'{x:.0%}' for x in floor)})",
          flush=True)
    agent = _faust_agent(bootstrap, raw, out_f, 20_000, tmp_path / "faust-agent")
    print(f"bare Faust pass-through agent: {agent:,.0f} records/s = {agent / pt:.1%} of "
          f"pass-through; {load_line()}")
    record("router_throughput", {"records": total, "partitions": PARTITIONS,
                                 "passthrough_per_s": round(pt), "router_per_s": round(router),
                                 "faust_agent_per_s": round(agent),
                                 "router_ratio": round(router / pt, 3),
                                 "router_ratio_rounds": [round(x, 3) for x in ratios],
                                 "router_cpu_ratio_rounds": [round(x, 3) for x in cpu],
                                 "interpreted_ratio_rounds": [round(x, 3) for x in interpreted],
                                 "txn_floor_ratio_rounds": [round(x, 3) for x in floor],
                                 "faust_agent_ratio": round(agent / pt, 4)})
    assert router > 0 and pt > 0


def test_router_vs_passthrough_at_64_partitions(bootstrap: str, tmp_path: Path) -> None:
    """The router against the pass-through loop at a production partition count (#33): data
    of the same shape as :func:`test_router_vs_passthrough`'s, five times as much (a run of
    200,000 records over 64 partitions is mostly its start), over 64 partitions, each batch
    spread over all of them (so a batch commits 64 partitions' checkpoints), alternating
    rounds."""
    tag = f"many-{int(time.time())}"
    raw, ctl, st = f"bench.raw-{tag}", f"ctl-{tag}", f"st-{tag}"
    create_topics(bootstrap, {raw: MANY, ctl: 1, st: 1})
    total = _fill(bootstrap, raw, MANY_EVENTS, partitions=MANY)
    plan = whole_switch(BASE_T + MANY_EVENTS * 5)
    warm = f"bench.out-{tag}-warm"
    create_topics(bootstrap, {f"{warm}-pt": MANY, warm: MANY, f"{warm}.dlq": MANY})
    passthrough_measured(bootstrap, raw, f"{warm}-pt", total, MANY)
    _router(bootstrap, raw, warm, ctl, st, total, tmp_path / "state-warm", segments=plan,
            events=MANY_EVENTS)
    rounds: list[tuple[Measured, Measured]] = []
    for r in range(MANY_ROUNDS):
        o_pt, o_r = f"bench.out-{tag}-pt{r}", f"bench.out-{tag}-r{r}"
        create_topics(bootstrap, {o_pt: MANY, o_r: MANY, f"{o_r}.dlq": MANY})
        runs: dict[str, Callable[[], Measured]] = {
            "pt": partial(passthrough_measured, bootstrap, raw, o_pt, total, MANY),
            "router": partial(_router, bootstrap, raw, o_r, ctl, st, total,
                              tmp_path / f"state-{r}", segments=plan, events=MANY_EVENTS)}
        got = {name: runs[name]() for name in (runs if r % 2 == 0 else reversed(runs))}
        shutil.rmtree(tmp_path / f"state-{r}", ignore_errors=True)
        rounds.append((got["pt"], got["router"]))
        print(f"\n{MANY} partitions, round {r + 1}: confluent pass-through loop "
              f"{got['pt'].per_s:,.0f} records/s, router {got['router'].per_s:,.0f} records/s "
              f"= {got['router'].per_s / got['pt'].per_s:.0%}", flush=True)
    m = _medians(rounds)
    ratios, cpu, pt, router = m.ratios, m.cpu, m.passthrough_per_s, m.router_per_s
    print(f"\nat {MANY} partitions the router routes {router / pt:.0%} of the pass-through "
          f"loop's records/s (median of {MANY_ROUNDS} rounds: "
          f"{', '.join(f'{x:.0%}' for x in ratios)}; target at least 100%: "
          f"{'PASS' if router >= pt else 'FAIL'}); CPU per raw record "
          f"{statistics.median(cpu):.2f}x the loop's; {load_line()}", flush=True)
    record("router_throughput_64", {"records": total, "partitions": MANY,
                                    "passthrough_per_s": round(pt),
                                    "router_per_s": round(router),
                                    "router_ratio": round(router / pt, 3),
                                    "router_ratio_rounds": [round(x, 3) for x in ratios],
                                    "router_cpu_ratio_rounds": [round(x, 3) for x in cpu]})
    assert router > 0 and pt > 0


def test_router_transactions_cost(broker: BrokerUnderTest, tmp_path: Path) -> None:
    """The router with each batch in transactions vs without, on the same data, in alternating
    rounds; the figure is the median of the per-round ratios (on / off)."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    bootstrap = broker.bootstrap
    tag = f"txn-{int(time.time())}"
    raw, ctl, st = f"bench.raw-{tag}", f"ctl-{tag}", f"st-{tag}"
    create_topics(bootstrap, {raw: PARTITIONS, ctl: 1, st: 1})
    total = _fill(bootstrap, raw)
    rounds: list[tuple[float, float]] = []
    for r in range(TXN_ROUNDS):
        rates = {}
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            out = f"bench.out-{tag}-{mode}-{r}"
            create_topics(bootstrap, {out: PARTITIONS, f"{out}.dlq": PARTITIONS})
            rates[mode] = _router(bootstrap, raw, out, ctl, st, total,
                                  tmp_path / f"state-{mode}-{r}", transactions=mode).per_s
            shutil.rmtree(tmp_path / f"state-{mode}-{r}", ignore_errors=True)
        rounds.append((rates["off"], rates["on"]))
        print(f"\nround {r + 1}: router without transactions {rates['off']:,.0f} records/s, "
              f"with {rates['on']:,.0f} records/s = {rates['on'] / rates['off']:.0%}",
              flush=True)
    off, on = sorted(rounds, key=lambda x: x[1] / x[0])[len(rounds) // 2]
    ratios = [b / a for a, b in rounds]
    print(f"\nrouter with transactions: {on:,.0f} records/s, without: {off:,.0f} records/s "
          f"= {on / off:.0%} (median of {TXN_ROUNDS} alternating rounds: "
          f"{', '.join(f'{x:.0%}' for x in ratios)}); {load_line()}", flush=True)
    record("router_transactions", {"records": total, "partitions": PARTITIONS,
                                   "off_per_s": round(off), "on_per_s": round(on),
                                   "ratio": round(on / off, 3),
                                   "ratio_rounds": [round(x, 3) for x in ratios]})
    assert on > 0 and off > 0
