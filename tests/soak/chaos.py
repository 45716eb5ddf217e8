"""One chaos run: a route on a three-broker cluster, workers, the workload, plans switching back
and forth, faults, and at the end the checker's verdict and each fault's gaps.

The same run serves the 30-minute soak (faults at random times, one every 60-90 s, their kinds
drawn in shuffled rounds so that every kind comes up in every run), the
fault cells of the conformance grid (a fixed list of faults, a shorter run) and its canary
cells (a fixed list of plan steps instead of switches back and forth, the fault at a random
time during them). It bounds itself in time and stops every worker it started, whatever
happens; the cluster belongs to the caller.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cutover.control.routes import Target
from cutover.settings import DedupSettings
from router.base.kafka_io import base_conf
from testground.brokers import create_topics
from testground.kafka_broker import KafkaCluster
from tests.soak.checker import OutputWatcher, Verdict, verify
from tests.soak.cluster_faults import FaultInjector, FaultKind, FaultRecord
from tests.soak.forensics import dump_lost, dump_state
from tests.soak.gaps import PartitionGap, worst_partition
from tests.soak.plans import PlanSwitcher, Step
from tests.soak.router_workers import RouteTopics, WorkerPool
from tests.soak.rss import WorkerRss, rss_summary
from tests.soak.workload import VERSIONS, Workload

QUIET_S = 20.0   # at least this long between one fault's end and the next one's start


class ChaosSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    minutes: float = 30.0                   # faults are started until this much time has passed
    partitions: int = 12
    workers: int = 2
    rate: float = 120.0                     # events per second, each written by both versions
    switch_every_s: float = 150.0
    plan_lead_ms: int = 30_000
    fault_every_s: tuple[float, float] = (60.0, 90.0)   # start to start
    down_s: tuple[float, float] = (10.0, 20.0)          # a killed broker stays down
    frozen_s: tuple[float, float] = (20.0, 40.0)        # a zombie worker stays frozen
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    schedule: tuple[FaultKind, ...] | None = None   # these faults in order, instead of random
    warmup_s: float = 20.0                  # steady output before the first fault
    settle_s: float = 40.0                  # after the last fault, before the input stops
    drain_s: float = 120.0                  # at most, for the output to complete
    rss_min_span_s: float = 300.0           # judge RSS over at least this long
    # the route's dedup.retention_ms (None: the router's default); memory is judged from the
    # time the stores first hold a whole window (tests/soak/rss.py)
    retention_ms: int | None = None
    # these plan steps, one every switch_every_s, instead of switching back and forth; the
    # input then runs until the last step's boundary is step_tail_s of event time behind it
    steps: tuple[Step, ...] | None = None
    step_tail_s: float = 15.0
    first_fault_s: tuple[float, float] | None = None   # after the switches start (None: at once)
    keyless_every: int = 0      # every this-many-th event has no key (0: every one has one)


class FaultOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fault: FaultRecord
    gap: PartitionGap


class RssRow(BaseModel):
    """One sample of one worker process (tests/soak/router_workers.py's RssSample), ``at``
    seconds after the run started."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str
    pid: int
    at: float
    rss_mb: float
    anon_mb: float | None
    file_mb: float | None
    stores_mb: float | None
    filters_mb: float | None
    threads: int | None
    partitions: int | None


class ChaosResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    settings: ChaosSettings
    started: float
    duration_s: float = 0.0
    events: int = 0
    plans: int = 0
    faults: list[FaultOutcome] = []
    verdict: Verdict = Verdict()
    rss: list[WorkerRss] = []
    rss_series: list[RssRow] = []   # every worker process's samples, for a look afterwards
    notes: list[str] = []   # what went wrong outside the verdict (a worker that exited, ...)


def chaos_run(cluster: KafkaCluster, root: Path, s: ChaosSettings,
              say: Callable[[str], None] = print) -> ChaosResult:
    """Run the route through ``s``'s faults on ``cluster`` (already started) and verify it."""
    rng = random.Random(s.seed)
    res = ChaosResult(settings=s, started=time.time())
    name = f"soak{uuid.uuid4().hex[:6]}"
    topics = RouteTopics(route=name, raw=f"{name}.raw", output=f"{name}.out",
                         dead_letter=f"{name}.dlq", control=f"{name}.control",
                         status=f"{name}.status", group=f"{name}-router")
    bootstrap = cluster.bootstrap
    create_topics(bootstrap, {topics.raw: s.partitions, topics.output: s.partitions,
                              topics.dead_letter: s.partitions, topics.control: 1,
                              topics.status: 1}, compacted=[topics.control])
    root.mkdir(parents=True, exist_ok=True)
    pool = WorkerPool(root, bootstrap, topics, s.retention_ms)
    workload = Workload(bootstrap, topics.raw, s.partitions, s.rate, rng.randrange(1 << 30),
                        keyless_every=s.keyless_every)
    quiet = {**base_conf(bootstrap), "log_level": 0}  # a broker down is the point, not news
    switcher = PlanSwitcher(Target(quiet, topics.control, topics.status),
                            name, s.switch_every_s, s.plan_lead_ms, lambda: workload.max_t,
                            s.steps)
    watcher = OutputWatcher(bootstrap, topics.output, topics.status, name, s.partitions)
    injector = FaultInjector(cluster, pool, s.partitions, rng, s.down_s, s.frozen_s)
    records: list[FaultRecord] = []
    input_end = observed_until = time.time()
    try:
        switcher.publish_first()
        for _ in range(s.workers):
            pool.add()
        for w in pool.live():
            if not pool.wait_started(w, 90):
                res.notes.append(f"{w.instance_id} took no partitions within 90 s of its start")
        watcher.start()
        workload.start()
        say(f"route {name}: {s.partitions} partitions, workers "
            f"{', '.join(w.instance_id for w in pool.live())}, {s.rate:g} events/s per version")
        _wait_flowing(watcher, s, res)
        switcher.start()
        records = _fault_loop(s, rng, injector, pool, res, say)
        _sleep_sampling(pool, res, s.settle_s)
        _await_steps(s, switcher, workload, pool, res)
        switcher.stop()
        workload.stop()
        input_end = time.time()
        say("input stopped; waiting for the output to complete")
        _drain(watcher, workload, switcher, s.drain_s)
        time.sleep(3.0)  # a late duplicate would arrive now
        observed_until = time.time()
    finally:
        for stop in (switcher.stop, workload.stop, watcher.stop):
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                res.notes.append(f"stopping: {type(exc).__name__}: {exc}")
        pool.stop_all()
    res.notes += _errors(workload, switcher, watcher)
    res.events, res.plans = len(workload.events), len(switcher.published)
    res.verdict = verify(workload.events, _delivered(workload), switcher.published, watcher.log)
    if res.verdict.lost_samples or res.verdict.suspects:
        try:
            for path in dump_lost(bootstrap, topics.raw, topics.output, workload.events,
                                  res.verdict.lost_samples, root, res.verdict.suspects):
                res.notes.append(f"partition of lost or wrong records dumped: {path}")
            held = {workload.events[n].partition
                    for n in res.verdict.lost_samples + res.verdict.suspects
                    if n in workload.events}
            for path in dump_state(bootstrap, name, topics.status,
                                   f"{topics.group}.checkpoints", held, root):
                res.notes.append(f"their checkpoints and the workers' statuses: {path}")
        except Exception as exc:  # forensics must not hide the verdict
            res.notes.append(f"dumping the lost or wrong records' partitions: {exc}")
    inputs = [workload.logs[v].acked_at for v in VERSIONS]
    for i, f in enumerate(records):
        end = records[i + 1].started if i + 1 < len(records) else input_end
        res.faults.append(FaultOutcome(fault=f, gap=worst_partition(
            watcher.log.arrived_at, inputs, f.started, end, observed_until)))
    first_end = records[0].ended if records else res.started
    retention_ms = s.retention_ms or DedupSettings().retention_ms
    res.rss = rss_summary(pool.workers.values(), first_end, s.rss_min_span_s,
                          window_full_at=res.started + retention_ms / 1000)
    res.rss_series = [RssRow(instance_id=w.instance_id, pid=x.pid, at=round(x.at - res.started, 1),
                             rss_mb=x.rss_mb, anon_mb=x.anon_mb, file_mb=x.file_mb,
                             stores_mb=x.stores_mb, filters_mb=x.filters_mb, threads=x.threads,
                             partitions=x.partitions)
                      for w in pool.workers.values() for x in w.rss]
    res.duration_s = round(time.time() - res.started, 1)
    return res


def _delivered(workload: Workload) -> dict[str, set[int]]:
    return {v: log.delivered for v, log in workload.logs.items()}


def _errors(workload: Workload, switcher: PlanSwitcher, watcher: OutputWatcher) -> list[str]:
    out = [f"workload: {e}" for e in [workload.error] if e]
    out += [f"{v} producer fatal: {e}" for v, log in workload.logs.items()
            for e in log.fatal_errors]
    out += [f"{v}: {log.failed} records not acknowledged" for v, log in workload.logs.items()
            if log.failed]
    out += [f"plans: {e}" for e in switcher.errors]
    out += [f"checker: {e}" for e in [watcher.error] if e]
    return out


def _wait_flowing(watcher: OutputWatcher, s: ChaosSettings, res: ChaosResult) -> None:
    """Until every partition has output, then ``warmup_s`` more."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(watcher.log.arrived_at[p] for p in range(s.partitions)):
            break
        time.sleep(0.5)
    else:
        res.notes.append("not every partition had output within 120 s of the start")
    time.sleep(s.warmup_s)


def _fault_loop(s: ChaosSettings, rng: random.Random, injector: FaultInjector,
                pool: WorkerPool, res: ChaosResult,
                say: Callable[[str], None]) -> list[FaultRecord]:
    """Faults ``fault_every_s`` apart (start to start), each at least ``QUIET_S`` after the
    previous one ended, until ``minutes`` have passed or the schedule is done."""
    records: list[FaultRecord] = []
    end_at = time.time() + s.minutes * 60
    queue = list(s.schedule) if s.schedule is not None else None
    draws = fault_kinds(rng, s.kinds)
    first_at = time.time() + (0.0 if s.first_fault_s is None else rng.uniform(*s.first_fault_s))
    while queue is None or queue:
        at = first_at
        if records:
            last = records[-1]
            at = max(last.started + rng.uniform(*s.fault_every_s), last.ended + QUIET_S)
        if queue is None and at >= end_at:
            break
        _sleep_sampling(pool, res, at - time.time())
        kind = queue.pop(0) if queue is not None else next(draws)
        say(f"{time.strftime('%H:%M:%S')} fault {len(records) + 1}: {kind.value} ...")
        rec = injector.inject(kind)
        records.append(rec)
        say(f"{time.strftime('%H:%M:%S')}   {rec.target} ({rec.ended - rec.started:.0f} s)"
            f"{''.join('; ' + n for n in rec.notes)}")
    return records


def _await_steps(s: ChaosSettings, switcher: PlanSwitcher, workload: Workload,
                 pool: WorkerPool, res: ChaosResult) -> None:
    """With plan steps: until the last one is published and the input is ``step_tail_s`` of
    event time past its boundary (at most the steps left, the lead, the tail and 30 s)."""
    if s.steps is None:
        return
    left = len(s.steps) - (switcher.plan.epoch - 1)
    deadline = (time.monotonic() + (left + 1) * s.switch_every_s + s.plan_lead_ms / 1000
                + s.step_tail_s + 30)
    while time.monotonic() < deadline:
        last = switcher.plan.boundaries[-1] if switcher.last_step_published else None
        if last is not None and (workload.max_t or 0) >= last + s.step_tail_s * 1000:
            return
        _sleep_sampling(pool, res, 1.0)
    res.notes.append(f"the plan steps did not all take effect: {switcher.plan.epoch - 1} of "
                     f"{len(s.steps)} published")


def fault_kinds(rng: random.Random, kinds: tuple[FaultKind, ...]) -> Iterator[FaultKind]:
    """Rounds of every kind once, each round in a new random order: a run of ``len(kinds)``
    faults or more meets every kind, which drawing each fault on its own did not promise (a
    whole 30-minute run once went without a zombie)."""
    while True:
        round_ = list(kinds)
        rng.shuffle(round_)
        yield from round_


def _sleep_sampling(pool: WorkerPool, res: ChaosResult, seconds: float) -> None:
    """Sleep, sampling the workers' memory and restarting any that exited by itself."""
    until = time.monotonic() + seconds
    while True:
        pool.sample_rss()
        res.notes += pool.supervise()
        left = until - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(5.0, left))


def _drain(watcher: OutputWatcher, workload: Workload, switcher: PlanSwitcher,
           timeout: float) -> None:
    """Until the output holds every expected record (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = verify(workload.events, _delivered(workload), switcher.published, watcher.log)
        if v.lost == 0:
            return
        time.sleep(3.0)
