"""Real-Spark cells of the conformance grid: the example jobs under ``cutover tag``.

One cell: a seeded order stream goes to an input topic, partly before the jobs start and then
in small slices while they run. Blue and green (real PySpark in local mode, each with its own
checkpoint) write to one shared raw topic; one ``cutover router`` worker routes it. Once green
has caught up, ``cutover switch --at auto``; at CLEAR_TO_TEARDOWN blue is killed (the teardown)
and green goes on alone for a while. Then the output topic is checked by the grid's own
verifier against a reference computed in plain Python from the input: every window (or order)
from blue below its partition's effective boundary, from green at or above it (the boundary as
pinned per partition, read from the status topic).

A canary cell (``SparkCell.canary``) switches twice: first ``cutover switch --canary
green:SHARE --at auto`` gives green a share of the keys, and once that boundary is clear and
the canary segment has been routed for a while, ``cutover switch --to green --at auto`` gives
it every key; the teardown follows as above. Its reference takes each record's version from
the published plan by the product's own rule (cutover.key_primary) with each boundary as
pinned on the record's partition, and the cell fails unless green forwarded some keys and blue
others in the canary segment.

Why the input is written in flushed slices: a record is late in Spark when its batch's
watermark has passed it, and a batch reads a prefix of every partition. With every slice
acknowledged before the next one is produced, a batch can split only the newest slice, so no
record is ever behind the watermark by more than a slice's span plus the disorder, which stays
below the jobs' 5 s lateness: nothing is dropped, and the reference needs no checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from pydantic import BaseModel, ConfigDict

from cutover.control.routes import RouteView
from cutover.headers import EVENT_TIME, VERSION, parse_headers
from cutover.key_primary import primary_for
from cutover.plan import CutoverPlan
from cutover.status import TransitionState
from router.base.kafka_io import base_conf, read_to_end
from spark_tagger.partitioner import partition_for
from spark_tagger.testing import EventSpec, Order, make_orders
from testground.brokers import create_topics, end_offsets
from tests.children import RouterChild
from tests.conformance.data import headers_of
from tests.conformance.runner import (
    NEW,
    OLD,
    CellResult,
    OutRecord,
    StatusFollower,
    run_cli,
    verify,
)
from tests.conformance.scenario import Failure, Scenario
from tests.spark.spark_test_support import (
    CONNECT_LOCAL_ENV,
    JOBS,
    TagRun,
    committed_batches,
    tag_command,
)

Job = Literal["windowed_totals", "enrich_orders", "windowed_totals_foreach_batch",
              "windowed_totals_connect"]
JOB_FILES: dict[str, dict[str, str]] = {
    "windowed_totals": {OLD: "windowed_totals.py", NEW: "windowed_totals_green.py"},
    # the same windows, written from foreachBatch with the batch Kafka writer
    "windowed_totals_foreach_batch": {OLD: "windowed_totals_foreach_batch.py",
                                      NEW: "windowed_totals_foreach_batch_green.py"},
    # the same windows, the jobs' sessions on Spark Connect (remote("local[2]"))
    "windowed_totals_connect": {OLD: "windowed_totals_connect.py",
                                NEW: "windowed_totals_connect_green.py"},
    "enrich_orders": {OLD: "enrich_orders.py", NEW: "enrich_orders_green.py"},
}
WINDOW_MS = 10_000        # the windowed job's tumbling window
DELAY_MS = 5_000          # both jobs' watermark delay
INPUT_PARTITIONS = 2
RAW_PARTITIONS = 4        # the customers below leave partition 0 idle: heartbeats only
CUSTOMERS = 8
STEP_MS = 250             # event time between consecutive orders
DISORDER_MS = 1_000       # how far an order may lag the newest one
SLICE = 8                 # orders per flushed slice (2 s of event time)
SLICE_EVERY_S = 0.5       # while the jobs run: event time moves 4x faster than the clock
PRELOAD = 120             # orders written before the jobs start (30 s of event time)
CLOSING_GAP_MS = 30_000   # the last order, this far ahead, closes every window before it
RUN_AFTER_TEARDOWN_S = 6.0
CATCH_UP_MS = 20_000      # green counts as caught up this close behind blue's watermark
EUR_RATES = {"DE": Decimal("1.00"), "FR": Decimal("1.00"), "US": Decimal("0.92"),
             "GB": Decimal("1.17"), "JP": Decimal("0.0061")}
MIN_AMOUNT = Decimal(5)


class SparkCell(BaseModel):
    """A real-Spark cell: which example job, the handover mode and the injected failure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job: Job
    handover: Literal["ordered", "immediate"]
    failure: Literal[Failure.NONE, Failure.OLD_JOB_REPLAY] = Failure.NONE
    seed: int = 31
    margin: str = "20s"   # ``cutover switch --margin``: how far ahead of the horizon
    # green's share of the keys in a first switch (``--canary green:SHARE``), then a second
    # switch gives green every key; None: one whole switch
    canary: float | None = None

    @property
    def id(self) -> str:
        tail = f"-canary{round(self.canary * 100)}" if self.canary is not None else ""
        return f"spark-{self.job}-{self.failure.value}-{self.handover}{tail}"

    @property
    def label(self) -> str:
        """The job as the report names the cell (a canary cell says so)."""
        if self.canary is None:
            return self.job
        return f"{self.job}, canary {NEW}:{self.canary * 100:g}% then whole"

    def scenario(self) -> Scenario:
        """The grid's dimensions for this cell (one Kafka source, record identity)."""
        busy = {partition_for(f"c{i:03d}".encode(), None, RAW_PARTITIONS)
                for i in range(CUSTOMERS)}
        return Scenario(sources=1, divergence="none",
                        idle="some" if len(busy) < RAW_PARTITIONS else "none",
                        failure=self.failure, identity="record", handover=self.handover,
                        shape="windowed" if windowed(self.job) else "stateless",
                        seed=self.seed)


SPARK_CELLS = (
    SparkCell(job="windowed_totals", handover="ordered"),
    SparkCell(job="enrich_orders", handover="immediate", seed=32),
    # a wide margin keeps the transition PENDING long enough to kill blue inside it
    SparkCell(job="windowed_totals", handover="ordered", failure=Failure.OLD_JOB_REPLAY,
              seed=33, margin="60s"),
    SparkCell(job="windowed_totals_foreach_batch", handover="ordered", seed=34),
    SparkCell(job="windowed_totals_connect", handover="ordered", seed=35),
    # Per-key canary. The jobs key their output by customer, c000..c007, whose buckets are
    # 2532, 9768, 9677, 7327, 1995, 4657, 4649, 8689 (cutover.key_bucket): 25% (buckets
    # < 2500) would give green c004 alone, so the share is 30% (< 3000): c000 and c004 go to
    # green in the canary segment, the other six stay blue's.
    SparkCell(job="windowed_totals", handover="ordered", seed=36, canary=0.3),
)
CANARY_RUN_S = 8.0   # how long the canary segment is routed before the second switch


def windowed(job: str) -> bool:
    """The jobs whose output is one record per closed window (the same values either way)."""
    return job.startswith("windowed_totals")


# -- input ------------------------------------------------------------------------------------


class InputWriter:
    """Writes a seeded order stream in flushed slices: a burst, then a paced thread."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        self.topic = topic
        self.pending = make_orders(EventSpec(seed=seed, count=4_000, customers=CUSTOMERS,
                                             step_ms=STEP_MS, max_disorder_ms=DISORDER_MS))
        self.written: list[Order] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                  "enable.idempotence": True})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def write(self, n: int) -> None:
        """The next ``n`` orders, one flushed slice at a time."""
        while n > 0 and self.pending:
            chunk, self.pending = self.pending[:min(n, SLICE)], self.pending[min(n, SLICE):]
            self._send(chunk)
            n -= len(chunk)

    def _send(self, orders: list[Order]) -> None:
        errors: list[str] = []
        for o in orders:
            self.producer.produce(self.topic, key=o.key, value=o.value,
                                  partition=partition_for(o.key, None, INPUT_PARTITIONS),
                                  on_delivery=lambda e, _m: errors.append(str(e)) if e else None)
        if self.producer.flush(30) or errors:
            raise RuntimeError(f"writing input to {self.topic} failed: {errors[:3]}")
        self.written.extend(orders)

    def start(self) -> None:
        def loop() -> None:
            try:
                while not self._stop.wait(SLICE_EVERY_S) and self.pending:
                    self.write(SLICE)
            except BaseException as exc:  # surfaced by stop()
                self.error = exc

        self._thread = threading.Thread(target=loop, name="input-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.error is not None:
            raise RuntimeError(f"the input writer failed: {self.error}")

    def close_windows(self) -> int:
        """One last order far ahead: its watermark closes every window before it. Returns the
        jobs' final watermark."""
        last = max(o.ts for o in self.written) + CLOSING_GAP_MS
        self._send([Order(order_id=f"close-{last}", customer="c000", country="DE", amount=1.0,
                          ts=last)])
        return last - DELAY_MS

    def top(self) -> int:
        return max(o.ts for o in self.written)


# -- reference --------------------------------------------------------------------------------


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _plain(x: Any) -> Any:
    return format(x.normalize(), "f") if isinstance(x, Decimal) else x


def canonical(fields: dict[str, Any]) -> bytes:
    """One byte form for a value however Spark formats its numbers (12.50 == 12.5)."""
    return json.dumps({k: _plain(v) for k, v in fields.items()}, sort_keys=True).encode()


def parse_output(job: str, value: bytes | None) -> tuple[bytes, dict[str, Any]]:
    """(identity, fields) of a record's value: (customer, window) or the order id."""
    v = json.loads(value or b"", parse_float=Decimal)
    if windowed(job):
        v["window_start"], v["window_end"] = _ms(v["window_start"]), _ms(v["window_end"])
        return v["customer"].encode(), v
    return v["order_id"].encode(), v


def windowed_value(version: str, customer: str, start: int, orders: list[Order]
                   ) -> dict[str, Any]:
    """What each version's windowed job emits for one window (see examples/jobs)."""
    amounts = [Decimal(str(o.amount)) for o in orders]
    total = sum(amounts, Decimal(0))
    out: dict[str, Any] = {"customer": customer, "window_start": start,
                           "window_end": start + WINDOW_MS, "orders": len(orders)}
    if version == OLD:
        out["total"] = total
    else:
        out["total"] = int(total.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        out["max_amount"] = max(amounts)
    return out


def enrich_value(version: str, o: Order) -> dict[str, Any]:
    """What each version's enrichment job emits for one order (see examples/jobs)."""
    amount = Decimal(str(o.amount))
    out: dict[str, Any] = {
        "order_id": o.order_id, "customer": o.customer, "country": o.country,
        "amount": amount, "ts": o.ts,
        "amount_eur": (amount * EUR_RATES[o.country]).quantize(Decimal("0.01"), ROUND_HALF_UP),
        "tier": "high" if amount >= (100 if version == OLD else 150) else "normal",
    }
    if version == NEW:
        out["amount_cents"] = int(amount * 100)
    return out


Ref = dict[tuple[int, bytes, int], tuple[str, bytes]]


def version_by_plan(plan: CutoverPlan, pins: list[dict[int, int]], partition: int,
                    key: bytes | None, t: int) -> str:
    """The primary of a record by the product's own rule (cutover.key_primary): the plan's
    segment at ``t`` with the partition's effective boundaries (``pins[i]``: each
    partition's boundary of the plan's segment ``i + 1``, as pinned), then the key's bucket;
    a record without a key follows the segment's primary."""
    segment = 0
    for i, pinned in enumerate(pins):
        if t >= pinned[partition]:
            segment = i + 1
    return primary_for(plan.segments[segment].rule, key)


def reference(job: str, orders: list[Order], pins: dict[int, int], final_wm: int,
              plan: tuple[CutoverPlan, list[dict[int, int]]] | None = None) -> Ref:
    """(partition, identity, event time) -> (version, canonical value), from the input alone:
    blue below the partition's effective boundary, green at or above it; with ``plan`` (the
    plan as published and each boundary's pins per partition) the version is the plan's
    primary for the record's key. A window's event time is its end (exclusive); windows the
    final watermark never passed stay open and are out."""
    ref: Ref = {}

    def add(customer: str, t: int, ident: bytes, value: Callable[[str], dict[str, Any]]) -> None:
        p = partition_for(customer.encode(), None, RAW_PARTITIONS)
        if plan is None:
            version = NEW if t >= pins[p] else OLD
        else:
            version = version_by_plan(plan[0], plan[1], p, customer.encode(), t)
        ref[(p, ident, t)] = (version, canonical(value(version)))

    if windowed(job):
        groups: dict[tuple[str, int], list[Order]] = {}
        for o in orders:
            groups.setdefault((o.customer, o.ts - o.ts % WINDOW_MS), []).append(o)
        for (customer, start), members in groups.items():
            if start + WINDOW_MS <= final_wm:
                add(customer, start + WINDOW_MS, customer.encode(),
                    lambda v, c=customer, s=start, m=members: windowed_value(v, c, s, m))
    else:
        for o in orders:
            if Decimal(str(o.amount)) >= MIN_AMOUNT:
                add(o.customer, o.ts, o.order_id.encode(), lambda v, o=o: enrich_value(v, o))
    return ref


def as_verified(job: str, m: Any) -> OutRecord:
    """An output record in the verifier's terms: key = identity, value = canonical form."""
    try:
        ident, fields = parse_output(job, m.value())
        return OutRecord(m.partition(), ident, canonical(fields), headers_of(m))
    except (ValueError, KeyError, TypeError, AttributeError):
        return OutRecord(m.partition(), m.key(), m.value() or b"", headers_of(m))


def order_violation_note(out: list[OutRecord], pins: dict[int, int]) -> str:
    """Which batches the out-of-order records came from, and whether they carried a watermark
    at or above their partition's boundary (a batch emits windows below its own watermark)."""
    above: set[int] = set()
    late: Counter[tuple[str, int, bool]] = Counter()
    for m in out:
        tagged = parse_headers(list(m.headers.items()))
        t = tagged.event_time or 0
        if t >= pins[m.partition]:
            above.add(m.partition)
        elif m.partition in above:
            wm = tagged.watermark
            late[(tagged.version, tagged.batch or -1, wm is not None
                  and wm >= pins[m.partition])] += 1
    return "order violations: " + ", ".join(
        f"{n} from {v} batch {b}" + (" (carrying a watermark at or above the boundary)"
                                     if past else "")
        for (v, b, past), n in sorted(late.items()))


# -- the cell ---------------------------------------------------------------------------------


class BatchWatcher:
    """Follows the raw topic: which of blue's batches have data out but no heartbeat yet."""

    def __init__(self, bootstrap: str, topic: str, version: str) -> None:
        self.version = version
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "batch-watch",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                                  "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(RAW_PARTITIONS)])
        self.data: set[int] = set()
        self.beats: set[int] = set()

    def in_flight(self, after: int) -> int | None:
        for msg in self.consumer.consume(1000, 0.02):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"watching the raw topic: {msg.error()}")
                continue
            tagged = parse_headers(msg.headers())
            if tagged.version != self.version or tagged.batch is None:
                continue
            (self.beats if tagged.kind == "heartbeat" else self.data).add(tagged.batch)
        open_ = [b for b in self.data - self.beats if b > after]
        return min(open_) if open_ else None

    def close(self) -> None:
        self.consumer.close()


@dataclass
class SparkRun:
    """One real-Spark cell on its own topics, router worker and checkpoints."""

    cell: SparkCell
    bootstrap: str
    tmp: Path

    def __post_init__(self) -> None:
        n = f"s{uuid.uuid4().hex[:8]}"
        self.route, self.input, self.raw = n, f"{n}.in", f"{n}.raw"
        self.output, self.dlq = f"{n}.out", f"{n}.dlq"
        self.control, self.status = f"{n}.control", f"{n}.status"
        create_topics(self.bootstrap, {self.input: INPUT_PARTITIONS, self.raw: RAW_PARTITIONS,
                                       self.output: RAW_PARTITIONS, self.dlq: RAW_PARTITIONS,
                                       self.control: 1, self.status: 1},
                      compacted=[self.control])
        self.config = self.tmp / f"{n}.yaml"
        self.config.write_text(yaml.safe_dump({
            "bootstrap": self.bootstrap, "control_topic": self.control,
            "status_topic": self.status, "group_id": f"g-{n}",
            "state_dir": str(self.tmp / f"state-{n}"), "http_port": None,
            "status_interval_s": 0.5,
            "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
            "routes": [{"name": n, "inputs": [self.raw], "output": self.output,
                        "dead_letter": self.dlq, "handover": self.cell.handover,
                        "dedup": {"identity": "record", "retention_ms": 3_600_000}}],
        }))
        self.checkpoints = {v: self.tmp / f"ck-{v}" for v in (OLD, NEW)}
        self.jobs = {v: TagRun(tag_command(v, JOBS / JOB_FILES[self.cell.job][v], [
            "--bootstrap", self.bootstrap, "--input", self.input, "--output", self.raw,
            "--checkpoint", str(self.checkpoints[v]), "--trigger", "1 second"]),
            self.tmp / f"{self.cell.job}-{v}.log",
            CONNECT_LOCAL_ENV if self.cell.job.endswith("_connect") else {})
            for v in (OLD, NEW)}
        self.writer = InputWriter(self.bootstrap, self.input, self.cell.seed)
        self.follower = StatusFollower(self.bootstrap, self.status, self.route, RAW_PARTITIONS)
        self.worker: RouterChild | None = None
        self._stopped: set[str] = set()
        # a canary cell: the final plan and each of its boundaries' pins per partition
        self.canary_pins: list[dict[int, int]] | None = None
        self.plan: CutoverPlan | None = None

    # -- helpers -----------------------------------------------------------------------------

    def cli(self, *args: str) -> tuple[int, str]:
        return run_cli(self.config, *args)

    def alive(self) -> None:
        for v, job in self.jobs.items():
            if v not in self._stopped and job.proc.poll() is not None:
                raise RuntimeError(f"the {v} job exited {job.proc.returncode}:\n{job.tail(25)}")
        if self.worker is not None and self.worker.proc.poll() is not None:
            raise RuntimeError(f"the router exited: {self.worker.text()[-1500:]}")

    def wait_for(self, what: str, pred: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.alive()
            value = pred()
            if value:
                return value
            time.sleep(0.3)
        tails = "\n".join(f"--- {v} job:\n{j.tail(8)}" for v, j in self.jobs.items())
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; last status "
                           f"{self._describe(self.follower.view())}\n{tails}")

    @staticmethod
    def _describe(v: RouteView) -> str:
        return "; ".join(f"p{p}: horizon {ps.horizon} wm {ps.watermarks} held {ps.held}"
                         for p, (ps, *_) in sorted(v.partitions.items())) or "none"

    def caught_up(self, at_least: int) -> bool:
        """On every partition both watermarks are past ``at_least`` and green's is within
        CATCH_UP_MS of blue's."""
        v = self.follower.view()
        return len(v.partitions) == RAW_PARTITIONS and all(
            min(blue := ps.watermarks.get(OLD, -1), green := ps.watermarks.get(NEW, -1))
            >= at_least and green >= blue - CATCH_UP_MS for ps, *_ in v.partitions.values())

    def counters_note(self) -> str:
        sup: dict[str, int] = {}
        dups = 0
        for st in self.follower.workers.values():
            dups += st.counters.duplicates
            for v, n in st.counters.suppressed.items():
                sup[v] = sup.get(v, 0) + n
        return (f"router: suppressed {', '.join(f'{v} {n}' for v, n in sorted(sup.items()))}; "
                f"duplicates removed {dups}")

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> CellResult:
        started = time.monotonic()
        res = CellResult(cell=self.cell.scenario(), job=self.cell.label)
        ref: Ref = {}
        try:
            ref = self._drive(res)
        except Exception as exc:  # the cell keeps its row, with the reason
            res.reasons.append(f"run aborted: {type(exc).__name__}: {str(exc)[:1500]}")
        finally:
            with contextlib.suppress(Exception):
                self.writer.stop()
            for job in self.jobs.values():
                if job.proc.poll() is None:
                    job.kill()
            if self.worker is not None:
                self.worker.stop()
            self.follower.close()
        if ref:
            try:
                out = [as_verified(self.cell.job, m)
                       for m in read_to_end(base_conf(self.bootstrap), self.output)]
                dlq = sum(end_offsets(self.bootstrap, self.dlq).values())
                verify(res, ref, out, dlq, self.raw)
                if res.order_violations:
                    res.notes.append(order_violation_note(out, res.pins))
                versions = {version for version, _ in ref.values()}
                if versions != {OLD, NEW}:
                    res.reasons.append(f"the reference holds only {sorted(versions)}: the "
                                       "switch tested nothing")
                if self.canary_pins is not None:
                    self._check_canary_segment(res, out)
            except Exception as exc:
                res.reasons.append(f"verification aborted: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}")
        elif not res.reasons:
            res.reasons.append("no reference computed")
        res.duration_s = round(time.monotonic() - started, 1)
        return res

    def _drive(self, res: CellResult) -> Ref:
        self.worker = RouterChild(self.config, self.tmp / f"{self.route}-router.log")
        self.worker.wait_started(90)
        rc, out = self.cli("plan", "init", "--route", self.route, "--primary", OLD)
        if rc != 0:
            raise RuntimeError(f"plan init failed: {out}")
        self.writer.write(PRELOAD)
        preload_wm = self.writer.top() - DELAY_MS
        for job in self.jobs.values():
            job.start()
        self.writer.start()
        # Green has caught up: past the preloaded input and close behind blue everywhere.
        self.wait_for("green to catch up with blue on every partition",
                      lambda: self.caught_up(preload_wm), 360)
        t_switch = time.monotonic()
        if self.cell.canary is not None:
            # the canary: green takes a share of the keys at an automatic boundary, is routed
            # for a while, then a second switch gives it every key
            plan = self._switch(res, "--canary", f"{NEW}:{self.cell.canary * 100:g}%")
            self.canary_pins = [res.pins]
            # blue stays primary of the other keys: the canary's boundary is HANDED_OVER,
            # never CLEAR_TO_TEARDOWN
            state = self.wait_for("the canary's boundary HANDED_OVER", lambda: (
                s := self.follower.view().transition().state).clear and s, 300)
            if state is not TransitionState.HANDED_OVER:
                res.reasons.append(f"the canary's boundary reached {state.value}, not "
                                   "HANDED_OVER")
            res.notes.append(f"canary boundary {res.boundary} (pins {res.pins}) handed over "
                             f"after {time.monotonic() - t_switch:.1f} s")
            time.sleep(CANARY_RUN_S)
            t_switch = time.monotonic()
        plan = self._switch(res, "--to", NEW)
        if self.canary_pins is not None:
            self.canary_pins.append(res.pins)
            self.plan = plan
        if self.cell.failure is Failure.OLD_JOB_REPLAY:
            self._kill_and_restart_old(res)
        self.wait_for("CLEAR_TO_TEARDOWN", lambda: self.follower.view().transition().state
                      is TransitionState.CLEAR_TO_TEARDOWN, 300)
        res.clear_s = round(time.monotonic() - t_switch, 1)
        rc, out = self.cli("wait", "--route", self.route, "--for", "clear-to-teardown",
                           "--timeout", "10s", "--interval", "0.5")
        if rc != 0:
            raise RuntimeError(f"cutover wait disagrees: {out.strip()[-400:]}")
        # Teardown: blue goes; green runs on alone for a while, then the input closes.
        self.jobs[OLD].kill()
        self._stopped.add(OLD)
        time.sleep(RUN_AFTER_TEARDOWN_S)
        self.writer.stop()
        final_wm = self.writer.close_windows()
        ref = reference(self.cell.job, self.writer.written, res.pins, final_wm,
                        None if self.canary_pins is None or self.plan is None
                        else (self.plan, self.canary_pins))
        by_version = Counter(version for version, _ in ref.values())
        res.notes.append(f"reference: {OLD} {by_version[OLD]}, {NEW} {by_version[NEW]}")
        # counted as a read_committed consumer sees them (end offsets count commit markers)
        self.wait_for(f"the output to hold the reference's {len(ref)} records", lambda: sum(
            1 for _ in read_to_end(base_conf(self.bootstrap), self.output)) >= len(ref), 240)
        time.sleep(2.0)  # anything extra (a duplicate) would show up now
        self.alive()
        res.notes.append(self.counters_note())
        return ref

    def _switch(self, res: CellResult, *how: str) -> CutoverPlan:
        """``cutover switch --at auto`` (``how``: ``--to V`` or ``--canary V:SHARE``); waits
        for every partition on the new plan and reads its boundary and each partition's pin
        into ``res``. Returns the plan as published."""
        view = self.follower.view()
        epoch = view.plan.epoch if view.plan is not None else -1
        horizons = {p: ps.horizon for p, (ps, *_) in view.partitions.items()}
        rc, out = self.cli("switch", "--route", self.route, *how, "--at", "auto",
                           "--margin", self.cell.margin)
        if rc != 0:
            raise RuntimeError(f"switch {' '.join(how)} refused: {out.strip()}")
        plan: CutoverPlan = self.wait_for("the plan on the status topic", lambda: (
            (v := self.follower.view()).plan is not None and v.plan.epoch > epoch
            and v.plan.transition is not None and v.plan), 60)
        self.wait_for("every partition on the new plan", lambda: len(
            (v := self.follower.view()).partitions) == RAW_PARTITIONS and all(
            e == plan.epoch for _, e, *_ in v.partitions.values()), 60)
        assert plan.transition is not None
        res.boundary = plan.transition[2]
        res.pins = {p: b for p, pp in self.follower.view().progress().items()
                    if (b := pp.boundary) is not None}
        for p, h in horizons.items():
            if h is not None and res.pins[p] <= h:
                res.reasons.append(f"partition {p}: boundary {res.pins[p]} not above the "
                                   f"horizon {h} before the switch {' '.join(how)}")
        return plan

    def _check_canary_segment(self, res: CellResult, out: list[OutRecord]) -> None:
        """The canary must not pass vacuously: in its segment green forwarded records for
        some keys and blue for others."""
        assert self.canary_pins is not None
        first, second = self.canary_pins
        keys: dict[str, set[bytes]] = {OLD: set(), NEW: set()}
        counts: Counter[str] = Counter()
        for m in out:
            t = int(m.headers[EVENT_TIME])
            if first[m.partition] <= t < second[m.partition]:
                version = m.headers[VERSION].decode()
                counts[version] += 1
                keys.setdefault(version, set()).add(self._job_key(m))
        res.notes.append("canary segment forwarded: " + ", ".join(
            f"{v} {counts[v]} records of {sorted(k.decode() for k in keys[v])}"
            for v in (OLD, NEW)))
        if not keys[OLD] or not keys[NEW] or keys[OLD] & keys[NEW]:
            res.reasons.append("the canary segment does not split the keys between the "
                               f"versions: {OLD} {sorted(keys[OLD])}, {NEW} {sorted(keys[NEW])}")

    @staticmethod
    def _job_key(m: OutRecord) -> bytes:
        """The job's Kafka key of an output record: its customer (the identity of a windowed
        record, a field of an enriched order)."""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            customer = json.loads(m.value).get("customer")
            if isinstance(customer, str):
                return customer.encode()
        return m.key or b""

    def _kill_and_restart_old(self, res: CellResult) -> None:
        """kill -9 blue while the transition is pending, preferably between its data and its
        heartbeats (so the replay writes duplicates), then restart it on its checkpoint."""
        old = self.jobs[OLD]
        done_before = max(committed_batches(self.checkpoints[OLD]), default=-1)
        watcher = BatchWatcher(self.bootstrap, self.raw, OLD)
        offsets = self.checkpoints[OLD] / "offsets"
        try:
            deadline = time.monotonic() + 60
            batch = None
            while time.monotonic() < deadline and batch is None:
                self.alive()
                batch = watcher.in_flight(done_before)
            if batch is None:  # no data batch in time: kill it mid-batch whatever it does
                self.wait_for("a blue batch in progress", lambda: max(
                    (int(f.name) for f in offsets.iterdir() if f.name.isdigit()),
                    default=-1) > max(committed_batches(self.checkpoints[OLD]), default=-1), 60)
            old.kill()
        finally:
            watcher.close()
        state = self.follower.view().transition().state.value
        if state != TransitionState.PENDING.value:
            res.reasons.append(f"blue was killed at {state}, not while the switch was pending")
        started = max(int(f.name) for f in offsets.iterdir() if f.name.isdigit())
        unfinished = started not in committed_batches(self.checkpoints[OLD])
        what = (f"batch {started} uncommitted, "
                f"{'its data out' if batch == started else 'none of its data out'}"
                if unfinished else f"between batches (last {started} committed)")
        old.start()  # the same command and checkpoint: Spark replays an unfinished batch
        res.notes.append(f"blue kill -9 at {state}, {what}; restarted on its checkpoint")


def run_spark_cell(cell: SparkCell, bootstrap: str, tmp: Path) -> CellResult:
    tmp.mkdir(parents=True, exist_ok=True)
    return SparkRun(cell, bootstrap, tmp).run()
