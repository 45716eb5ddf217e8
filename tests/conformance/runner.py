"""Runs one cell against real router workers on the real broker, then verifies the whole output.

Kept separate from tests/integration/harness.py on purpose: the grid must not break when the
router's own test harness changes. It drives the router only through its public surface: the
settings file, ``cutover router`` as a child process (so kill -9 is real), the operator CLI and
the status topic.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from cutover.cli import main as cutover_main
from cutover.control.routes import PartitionReport, RouteView, Target, merge_report, read_views
from cutover.headers import EVENT_TIME, SRC, VERSION
from cutover.plan import CutoverPlan
from cutover.status import RouteStatus, TransitionState, parse_status
from router.base.kafka_io import base_conf, read_to_end, reader_conf
from testground.brokers import BrokerUnderTest, create_topics
from tests.children import RouterChild
from tests.conformance.data import (
    PARTITIONS,
    PHASE1_BATCHES,
    PHASE2_BATCHES,
    TOTAL_BATCHES,
    EmulatedJob,
    generate,
    headers_of,
    value_of,
)
from tests.conformance.scenario import Failure, Scenario
from tests.output_counts import OutputCounts

OLD, NEW = "blue", "green"
POISON = b"poison-"
# The old-job stall cell: the old job misses this many phase-2 batches (the new one writes
# ~17 records per partition per batch) on a route holding at most STALL_MAX_HELD per partition.
STALL_BATCHES = 5
STALL_MAX_HELD = 8


class CellResult(OutputCounts):
    """The verifier's counts for one cell; ``reasons`` is empty exactly when the cell passes."""

    cell: Scenario
    job: str | None = None   # a real Spark example job (tests/conformance/spark_slice.py)
    dead_lettered: int = 0
    # Records the cell put on the raw topic without the tagger's headers: each must reach the
    # dead-letter topic exactly once (the zombie cell's frozen batch carries some).
    dead_letters_expected: int = 0
    dead_letters_lost: int = 0
    dead_letters_duplicated: int = 0
    boundary: int | None = None
    pins: dict[int, int] = {}
    clear_s: float | None = None
    duration_s: float = 0.0
    notes: list[str] = []    # what the injected failure actually hit (e.g. held records)
    reasons: list[str] = []
    # Why the cell cannot run on this broker (it stays in the table, marked, never hidden).
    not_applicable: str | None = None
    # A failure this broker is known to leave (docs/design.md, "Durability: the output log is
    # the record of truth"): marked, never hidden.
    residual: str | None = None

    @property
    def passed(self) -> bool:
        return not self.reasons and self.not_applicable is None


def run_cli(config: Path, *args: str) -> tuple[int, str]:
    """Run an operator command in-process against ``config``, its output captured (a cell's
    progress lines stay clean)."""
    words = 2 if args[0] == "plan" else 1
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = cutover_main([*args[:words], "--config", str(config), *args[words:]])
    return rc, buf.getvalue()


class StatusFollower:
    """The route's merged view, kept current from one long-lived consumer of the status topic.

    ``cutover.control.routes.read_views`` re-reads both topics from the start (about 3 s a
    call on the test broker); polling it would dominate a cell's time. The merge is the same
    (``cutover.control.routes.merge_report``): per partition, the newest report of it in any
    status; the plan, the newest epoch any status carries.
    """

    def __init__(self, bootstrap: str, topic: str, route: str,
                 partitions: int = PARTITIONS) -> None:
        self.route = route
        self.partitions = partitions
        self.consumer = Consumer({**reader_conf(base_conf(bootstrap)), "fetch.wait.max.ms": 50})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.workers: dict[str, RouteStatus] = {}
        self.reports: dict[int, PartitionReport] = {}
        self.plan: CutoverPlan | None = None

    def view(self) -> RouteView:
        for msg in self.consumer.consume(10_000, 0.2):
            if msg.error() is not None or msg.value() is None:
                continue
            st = parse_status(msg.value())
            if st.route != self.route:
                continue
            if st.plan is not None and (self.plan is None or st.plan.epoch > self.plan.epoch):
                self.plan = st.plan
            if isinstance(st, RouteStatus):
                self.workers[st.worker] = st
                merge_report(self.reports, st)
        return RouteView(self.route, plan=self.plan, num_partitions=self.partitions,
                         partitions=dict(self.reports))

    def close(self) -> None:
        self.consumer.close()


class Cell:
    """One route (its own topics and consumer group) and everything one cell does to it."""

    def __init__(self, s: Scenario, broker: BrokerUnderTest, tmp: Path) -> None:
        self.s = s
        self.broker = broker
        bootstrap = self.bootstrap = broker.bootstrap
        self.tmp = tmp
        n = f"c{uuid.uuid4().hex[:8]}"
        self.route, self.raw, self.output, self.dlq = n, f"{n}.raw", f"{n}.out", f"{n}.dlq"
        self.control, self.status = f"{n}.control", f"{n}.status"
        create_topics(bootstrap, {self.raw: PARTITIONS, self.output: PARTITIONS,
                                  self.dlq: PARTITIONS, self.control: 1, self.status: 1},
                      compacted=[self.control])
        self.config = tmp / f"{n}.yaml"
        self.config.write_text(yaml.safe_dump({
            "bootstrap": bootstrap, "control_topic": self.control, "status_topic": self.status,
            "group_id": f"g-{n}", "state_dir": str(tmp / f"state-{n}"), "http_port": None,
            "status_interval_s": 0.5,
            "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "routes": [{"name": n, "inputs": [self.raw], "output": self.output,
                        "dead_letter": self.dlq, "handover": s.handover,
                        "dedup": {"identity": s.identity, "retention_ms": 3_600_000},
                        **({"max_held": STALL_MAX_HELD} if s.failure is Failure.OLD_STALL
                           else {})}],
        }))
        batches = generate(s)
        self.old = EmulatedJob(bootstrap, self.raw, OLD, batches, s.sources, s.shape)
        self.new = EmulatedJob(bootstrap, self.raw, NEW, batches, s.sources, s.shape)
        self.workers: list[RouterChild] = []
        self.follower = StatusFollower(bootstrap, self.status, self.route)
        self._n_workers = 0

    # -- operator ---------------------------------------------------------------------------

    def cli(self, *args: str) -> tuple[int, str]:
        return run_cli(self.config, *args)

    def view(self) -> RouteView:
        return self.follower.view()

    def operator_view(self) -> RouteView:
        """What ``cutover status`` sees (slow: reads both topics from the start)."""
        t = Target(base_conf(self.bootstrap), self.control, self.status,
                   {self.route: PARTITIONS})
        return read_views(t, self.route)[self.route]

    def start_worker(self, extra_env: dict[str, str] | None = None,
                     config: Path | None = None) -> RouterChild:
        self._n_workers += 1
        w = RouterChild(config or self.config, self.tmp / f"{self.route}-w{self._n_workers}.log",
                        extra_env)
        self.workers.append(w)
        w.wait_started()
        return w

    def wait_for(self, what: str, pred: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_caught_up(self) -> RouteView:
        """Until the router has routed every record written so far: each partition's horizon is
        the largest event time written to it and its watermarks are the jobs' watermarks."""
        box: list[RouteView] = []

        def ok() -> bool:
            v = self.view()
            box[:] = [v]
            if len(v.partitions) < PARTITIONS:
                return False
            for p in range(PARTITIONS):
                ps = v.partitions[p][0]
                top = max((x for x in (self.old.max_t(p), self.new.max_t(p)) if x is not None),
                          default=None)
                if ps.horizon != top:
                    return False
                for job in (self.old, self.new):
                    if job.heartbeat_wm is not None and ps.watermarks.get(job.version) != \
                            job.heartbeat_wm:
                        return False
            return True

        self.wait_for("the router to route everything written", ok)
        return box[0]

    # -- the cell ---------------------------------------------------------------------------

    def run(self) -> CellResult:
        started = time.monotonic()
        res = CellResult(cell=self.s)
        try:
            self._drive(res)
        except Exception as exc:  # the cell stays in the table with its reason
            res.reasons.append(f"run aborted: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            time.sleep(1.0)  # anything extra (a duplicate) would show up now
            for w in self.workers:
                w.stop()
            self.follower.close()
        try:
            self._verify(res)
        except Exception as exc:
            res.reasons.append(f"verification aborted: {type(exc).__name__}: {str(exc)[:300]}")
        res.duration_s = round(time.monotonic() - started, 1)
        return res

    def _mark(self, what: str) -> None:
        if os.environ.get("CONFORMANCE_DEBUG"):
            print(f"  {time.monotonic() - self._t0:6.1f}s {what}", file=sys.stderr, flush=True)

    def _drive(self, res: CellResult) -> None:
        s, old, new = self.s, self.old, self.new
        self._t0 = time.monotonic()
        arm = self.tmp / f"{self.route}.arm"
        worker = self.start_worker(
            {"CUTOVER_FAILPOINT": "pause-before-commit", "CUTOVER_FAILPOINT_ARM": str(arm)}
            if s.failure is Failure.ZOMBIE else None)
        self._mark("worker started")
        rc, out = self.cli("plan", "init", "--route", self.route, "--primary", OLD)
        if rc != 0:
            raise RuntimeError(f"plan init failed: {out}")
        # Phase 1: both run, the new version starting two batches late and catching up.
        for step in range(PHASE1_BATCHES):
            old.run_batch()
            if step >= 2:
                new.run_batch()
            if s.failure is Failure.ROUTER_KILL_BEFORE and step == PHASE1_BATCHES // 2:
                worker.kill9()
                worker = self.start_worker()
        while new.next_batch < old.next_batch:
            new.run_batch()
        self._mark("phase 1 written")
        view = self.wait_caught_up()
        horizons = {p: view.partitions[p][0].horizon for p in range(PARTITIONS)}
        self._mark("caught up")
        # The switch. A late plan names a boundary the router has already routed past.
        t_switch = time.monotonic()
        if s.failure is Failure.LATE_PLAN:
            late = min(h for h in horizons.values() if h is not None) - 2_000
            rc, out = self.cli("switch", "--route", self.route, "--to", NEW, "--at", str(late),
                               "--force")
        else:
            rc, out = self.cli("switch", "--route", self.route, "--to", NEW, "--at", "auto",
                               "--margin", "1s")
        if rc != 0:
            raise RuntimeError(f"switch failed: {out}")
        # A worker reports the plan on the status topic once it has read it (under load, not
        # always by the time the switch command returns).
        self.wait_for("a worker to report the switch", lambda: (
            (p := self.view().plan) is not None and p.transition is not None))
        view = self.view()
        assert view.plan is not None and view.plan.transition is not None
        epoch = view.plan.epoch
        self.wait_for("every partition on the new plan", lambda: all(
            e == epoch for _, e, *_ in self.view().partitions.values()))
        view = self.view()
        res.boundary = view.plan.transition[2]
        self._mark("plan applied")
        res.pins = {p: b for p, pp in view.progress().items() if (b := pp.boundary) is not None}
        for p, h in horizons.items():  # a pin is always above what was routed at arrival
            if h is not None and res.pins[p] <= h:
                res.reasons.append(f"partition {p}: boundary {res.pins[p]} not above the "
                                   f"horizon {h} at plan arrival")
        if s.failure is Failure.LATE_PLAN and not any(
                res.pins[p] != res.boundary for p, h in horizons.items() if h is not None):
            res.reasons.append("late plan: no partition was pinned")
        # Phase 2: the new version leads (its records are held in ordered handover).
        second: RouterChild | None = None
        killed: int | None = None
        for step in range(PHASE2_BATCHES):
            stalled = s.failure is Failure.OLD_STALL and step < STALL_BATCHES
            if s.failure is Failure.OLD_STALL and step == STALL_BATCHES:
                self._old_comes_back(res)
            for job in (new, old) if not stalled else (new,):
                crash = (s.failure is Failure.OLD_JOB_REPLAY and job is old) or \
                        (s.failure is Failure.NEW_JOB_REPLAY and job is new)
                if crash and step == 2:  # the crashed batch straddles the boundary
                    job.run_batch(crash_after=0.5)
                    job.replay(2)
                else:
                    job.run_batch()
            if s.failure is Failure.ROUTER_KILL_DURING and step == 1:  # surely PENDING
                v = self.view()
                res.notes.append(f"kill -9 at {v.transition().state.value}, held "
                                 f"{sum(ps.held for ps, *_ in v.partitions.values())}")
                worker.kill9()
                worker = self.start_worker()
            if s.failure is Failure.BROKER_KILL and step == 1:
                killed = self._kill_leader(res)
            if s.failure is Failure.BROKER_KILL and (step == 4 or self.broker.size == 1) \
                    and killed is not None:
                assert self.broker.cluster is not None
                time.sleep(1.0 if self.broker.size > 1 else 3.0)  # clients see it gone
                self.broker.cluster.restart(killed)
                res.notes.append(f"node {killed} back after batch {PHASE1_BATCHES + step}")
                killed = None
            if s.failure is Failure.ZOMBIE and step == 0:
                self.wait_caught_up()
                arm.touch()  # the worker's next batch with output freezes it: these
                self._poison(res)  # dead letters are in it
            if s.failure is Failure.ZOMBIE and step == 1:
                second = self._freeze_and_take_over(worker, res)
            if s.failure is Failure.ZOMBIE and step == 4 and second is not None:
                self._resume_zombie(worker, res)
            if s.failure is Failure.WORKER_JOIN_LEAVE and step == 1:
                second = self.start_worker()
            if s.failure is Failure.WORKER_JOIN_LEAVE and step == 5 and second is not None:
                second.stop()
        self._mark("phase 2 written")
        with contextlib.suppress(RuntimeError):
            self.wait_for("CLEAR_TO_TEARDOWN", lambda: self.view().transition().state
                          is TransitionState.CLEAR_TO_TEARDOWN, 90)
            res.clear_s = round(time.monotonic() - t_switch, 1)
        # The operator's own tool must agree (it reads the topics independently).
        rc, out = self.cli("wait", "--route", self.route, "--for", "clear-to-teardown",
                           "--timeout", "5s" if res.clear_s else "1s", "--interval", "0.3")
        if rc != 0:
            raise RuntimeError(f"cutover wait: no CLEAR_TO_TEARDOWN: {out.strip()[-400:]}")
        self._mark("clear")
        # Teardown of the old version; the new one goes on alone.
        if s.failure is Failure.ROUTER_KILL_AFTER:
            worker.kill9()
            worker = self.start_worker()
        while new.next_batch < TOTAL_BATCHES:
            new.run_batch()
        self.wait_caught_up()  # every record decided, while the workers still run
        self._mark("all routed")
        ref = self.reference(res.pins)
        with contextlib.suppress(RuntimeError):
            self.wait_for("the output to hold the reference's count",
                          lambda: self.committed(self.output) >= len(ref), 20)

    def _old_comes_back(self, res: CellResult) -> None:
        """After the stall: with ordered handover some partition must have paused at
        max_held; then the old job writes the batches it missed."""
        if self.s.handover == "ordered":
            self.wait_for("a partition paused at max_held", lambda: any(
                ps.paused for ps, *_ in self.view().partitions.values()), 30)
        v = self.view()
        res.notes.append(f"old job silent for {STALL_BATCHES} batches; paused partitions "
                         f"{sorted(p for p, (ps, *_) in v.partitions.items() if ps.paused)}, "
                         f"held {sum(ps.held for ps, *_ in v.partitions.values())} "
                         f"(max_held {STALL_MAX_HELD})")
        while self.old.next_batch < self.new.next_batch:
            self.old.run_batch()

    def _poison(self, res: CellResult) -> None:
        """One record per partition without the tagger's event time: dead letters."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for p in range(PARTITIONS):
            producer.produce(self.raw, b"{}", POISON + str(p).encode(), partition=p,
                             headers=[(VERSION, OLD.encode())])
        assert producer.flush(10) == 0
        res.dead_letters_expected = PARTITIONS

    def _freeze_and_take_over(self, zombie: RouterChild, res: CellResult) -> RouterChild:
        """The armed worker stops itself right after producing a batch, before committing it;
        a second worker joins and, once the frozen one's session has expired, takes over."""
        zombie.wait_for_line("failpoint pause-before-commit", 60)
        frozen = time.monotonic()
        # Its own state directory, as on another machine (the frozen worker holds its stores).
        settings = yaml.safe_load(self.config.read_text())
        config = self.tmp / f"{self.route}-second.yaml"
        config.write_text(yaml.safe_dump({**settings,
                                          "state_dir": settings["state_dir"] + "-second"}))
        second = self.start_worker(config=config)
        res.notes.append(f"worker frozen before its commit; partitions moved in "
                         f"{time.monotonic() - frozen:.1f}s")
        return second

    def _resume_zombie(self, zombie: RouterChild, res: CellResult) -> None:
        """Once the second worker has caught up, the frozen one goes on where it stopped."""
        self.wait_caught_up()
        os.killpg(zombie.proc.pid, signal.SIGCONT)
        zombie.wait_for_line("failpoint pause-before-commit: resumed", 30)
        res.notes.append("zombie resumed after the takeover had caught up")

    def _kill_leader(self, res: CellResult) -> int:
        """kill -9 of the node leading partition 0 of the output topic (even seeds) or of the
        raw topic (odd seeds), while the handover is pending."""
        cluster = self.broker.cluster
        assert cluster is not None
        topic = self.output if self.s.seed % 2 == 0 else self.raw
        node = cluster.leader(topic, 0)
        v = self.view()
        cluster.kill(node)
        res.notes.append(f"kill -9 of node {node} (leader of {topic.split('.')[-1]}:0) at "
                         f"{v.transition().state.value}")
        return node

    # -- verification -----------------------------------------------------------------------

    def committed(self, topic: str) -> int:
        """Records a read_committed consumer sees (end offsets also count transaction markers
        and aborted records)."""
        return sum(1 for _ in read_to_end(base_conf(self.bootstrap), topic))

    def reference(self, pins: dict[int, int]) -> dict[tuple[int, bytes, int], tuple[str, bytes]]:
        """(partition, key, event time) -> (version, value) of the one record the output must
        hold: for every event some version emitted, the copy of its primary under the pinned
        boundary of its partition, computed without the router."""
        ref: dict[tuple[int, bytes, int], tuple[str, bytes]] = {}
        for batch in self.old.batches:
            for e in batch:
                version = NEW if e.t >= pins[e.partition] else OLD
                job = self.new if version == NEW else self.old
                if (e.partition, e.key, e.t) in job.emitted:
                    ref[(e.partition, e.key, e.t)] = (version, value_of(e, version))
        return ref

    def _verify(self, res: CellResult) -> None:
        if not res.pins:
            res.reasons.append("no boundary known: nothing to check against")
            return
        out = [OutRecord.of(m) for m in read_to_end(base_conf(self.bootstrap), self.output)]
        dead = Counter(m.key() for m in read_to_end(base_conf(self.bootstrap), self.dlq))
        poison = {POISON + str(p).encode() for p in range(res.dead_letters_expected)}
        res.dead_letters_lost = sum(1 for k in poison if dead[k] == 0)
        res.dead_letters_duplicated = sum(n - 1 for k, n in dead.items() if k in poison)
        for name in ("dead_letters_lost", "dead_letters_duplicated"):
            if getattr(res, name):
                res.reasons.append(f"{getattr(res, name)} {name.replace('_', ' ')}")
        dlq = sum(n for k, n in dead.items() if k not in poison)
        verify(res, self.reference(res.pins), out, dlq, self.raw)


class OutRecord(NamedTuple):
    """What the verifier needs of one output record, in topic order."""

    partition: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]

    @classmethod
    def of(cls, m: Any) -> OutRecord:
        return cls(m.partition(), m.key(), m.value(), headers_of(m))


def verify(res: CellResult, ref: dict[tuple[int, bytes, int], tuple[str, bytes]],
           out: list[OutRecord], dead_lettered: int, raw_topic: str) -> None:
    """Count the output against the reference into ``res`` and give every failure a reason."""
    res.expected = len(ref)
    res.dead_lettered = dead_lettered
    res.forwarded = len(out)
    seen: Counter[tuple[int, bytes | None, int]] = Counter()
    above: dict[int, bool] = {}
    for m in out:
        p, h = m.partition, m.headers
        t, version = int(h[EVENT_TIME]), h[VERSION].decode()
        k = (p, m.key, t)
        want = ref.get(k)  # type: ignore[arg-type]
        if want is None:
            res.unexpected += 1
            continue
        if (version, m.value) != want:
            res.wrong_version += 1
            continue
        if not h.get(SRC, b"").decode().startswith(f"{raw_topic}:{p}:"):
            res.reasons.append(f"bad bg.src {h.get(SRC)!r} on partition {p}")
        seen[k] += 1
        if t >= res.pins[p]:
            above[p] = True
        elif above.get(p):
            res.order_violations += 1
    res.lost = sum(1 for k in ref if seen[k] == 0)
    res.duplicated = sum(n - 1 for n in seen.values() if n > 1)
    for name in ("lost", "duplicated", "wrong_version", "unexpected", "dead_lettered"):
        if getattr(res, name):
            res.reasons.append(f"{getattr(res, name)} {name.replace('_', ' ')}")
    if res.order_violations and res.cell.handover == "ordered":
        res.reasons.append(f"{res.order_violations} records below the boundary forwarded "
                           "after one at or above it")
    if res.clear_s is None and not any("aborted" in r for r in res.reasons):
        res.reasons.append("never CLEAR_TO_TEARDOWN")


def run_cell(s: Scenario, broker: BrokerUnderTest, tmp: Path) -> CellResult:
    if s.failure is Failure.BROKER_KILL and broker.cluster is None:
        why = ("Tansu keeps its log in memory: a killed broker comes back empty"
               if broker.kind == "tansu" else "the tests did not start this broker")
        return CellResult(cell=s, not_applicable=f"broker kill: {why}")
    tmp.mkdir(parents=True, exist_ok=True)
    res = Cell(s, broker, tmp).run()
    if s.failure is Failure.ZOMBIE and broker.kind == "tansu" and res.reasons and all(
            r.endswith("dead letters duplicated") for r in res.reasons):
        res.residual = ("without transactions (Tansu) dead letters are at-least-once: the "
                        "frozen batch's were delivered, and the new owner replayed them from "
                        "the checkpoint before them")
    return res
