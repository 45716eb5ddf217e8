"""The compiled per-record path (router/native/_fastpath.c) against the interpreted one, on the same
generated records: every output, in order, and every piece of state must be equal.

Two data paths are given the same owned partitions (each its own real RocksDB dedup store),
the same plans between batches and the same consumed batches (real ``confluent_kafka.Message``
objects); one decides with ``_handle_all``, the other with the compiled loop
(``router.native.compiled.CompiledLoop``). The records
mix what the compiled path takes (well-formed data of either version) with everything it must
leave (heartbeats, malformed and unusual headers, error records, poison timestamps, records
older than the retention, duplicates, records the ordered handover holds, identities the
filter cannot tell apart, a partition paused over max_held), under plans with and without a
per-key canary (whose rule the compiled path reads from each record's key bucket: starting,
growing, the full switch and the rollback). The producer is a recorder (the
subject is the decision and the output's order, not Kafka); it can refuse a produce with a
full queue or fail one, as confluent-kafka does.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutover import headers as hdr
from cutover.headers import (
    BATCH,
    EVENT_TIME,
    KIND,
    VERSION,
    WATERMARK,
    TaggedRecord,
    heartbeat_headers,
)
from cutover.key_bucket import key_bucket
from cutover.key_primary import Canary
from cutover.plan import CutoverPlan, Segment
from cutover.settings import RouteSettings, parse_settings
from router.dedup.store import DedupStore
from router.durability.output_writer import OutputWriter
from router.durability.partition import Owned, RouteRuntime
from router.durability.resume import Durability
from router.native import compiled
from router.rule.decision import PartitionRouter
from router.rule.identity import identity_function, record_identity
from router.worker.data_consumer import DataConsumer
from router.worker.datapath import DataPath

RAW = ("raw-a", "raw-b")
PARTS = (0, 1)
T0 = 1_767_225_600_000
RETENTION = 50_000
TOLERANCE = 20_000


def test_the_extension_is_built() -> None:
    """make test installs with a C compiler: the compiled path must be there (a router
    without it still works, interpreted, but the suite should say it was not built)."""
    assert compiled.available(), compiled.path_name()


@given(key=st.none() | st.binary(max_size=300), value=st.none() | st.binary(max_size=600),
       t=st.integers(-(1 << 63), (1 << 63) - 1))
def test_the_record_identity_is_the_same_digest(key: bytes | None, value: bytes | None,
                                                 t: int) -> None:
    assert compiled._fastpath is not None, compiled.path_name()
    assert compiled._fastpath.record_identity(key, value, t) == record_identity(key, value, t)


@given(key=st.binary(max_size=300))
def test_the_key_bucket_is_the_same(key: bytes) -> None:
    assert compiled._fastpath is not None, compiled.path_name()
    assert compiled._fastpath.key_bucket(key) == key_bucket(key)


def test_the_key_bucket_gives_the_contract_vectors() -> None:
    assert compiled._fastpath is not None, compiled.path_name()
    vectors = {b"": 9876, b"a": 3343, b"order-1": 6429, b"\x00\xff": 2500}
    assert {k: compiled._fastpath.key_bucket(k) for k in vectors} == vectors


class Recorder:
    """A producer that records what it is given; ``refuse`` makes the produce calls at those
    indexes raise BufferError once, ``fail`` raise KafkaException."""

    def __init__(self, refuse: set[int], fail: set[int]) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.calls = 0
        self.refuse, self.fail = set(refuse), set(fail)
        self.polls = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, callback: Any = None, on_delivery: Any = None,
                timestamp: int = 0, headers: Any = None) -> None:
        """confluent-kafka's signature, positions included (the compiled path passes them
        positionally)."""
        assert callback is None and on_delivery is None and timestamp == 0
        n = self.calls
        self.calls += 1
        if n in self.refuse:
            self.refuse.discard(n)
            raise BufferError("Local: Queue full")
        if n in self.fail:
            raise KafkaException(KafkaError(KafkaError._STATE, "transaction in bad state"))
        self.sent.append((topic, partition, key, value, list(headers or ())))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


class Seeks:
    """The data consumer, as far as the held bound's re-reads use it."""

    def __init__(self) -> None:
        self.seeks: list[tuple[str, int, int]] = []

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


def _world(root: Path, *, ordered: bool, max_held: int, identity: str,
           stream: bool, refuse: set[int], fail: set[int]) -> tuple[DataPath, Any]:
    rs = RouteSettings.model_validate({
        "name": "r", "inputs": list(RAW), "output": "out",
        "handover": "ordered" if ordered else "immediate", "max_held": max_held,
        "future_tolerance_ms": TOLERANCE,
        "dedup": {"retention_ms": RETENTION, "filter_bytes": 64, "identity": identity}})
    settings = parse_settings({"bootstrap": "127.0.0.1:9", "control_topic": "c",
                               "status_topic": "s", "group_id": "g",
                               "state_dir": str(root), "http_port": None,
                               "routes": [rs.model_dump(mode="json")]})
    dp = DataPath(settings, "w")
    rt = RouteRuntime(rs, identity_function(rs.dedup.identity), len(PARTS))
    producer = Recorder(refuse, fail)
    writer = OutputWriter({}, producer, None)
    by_tp = {}
    for p in PARTS:
        store = DedupStore(root / f"store-{p}", rs.dedup)
        router = PartitionRouter(p, identity=rt.identity, store=store,
                                 retention_ms=RETENTION, ordered=ordered, max_held=max_held,
                                 future_tolerance_ms=TOLERANCE)
        owned = Owned(rt, p, router, store, Durability(
            next_offsets=dict.fromkeys(RAW, 0), out_pos=0, known_end=0, rebuild_from=0))
        dp.owned[("r", p)] = owned
        for topic in RAW:
            by_tp[(topic, p)] = owned
    dp._parts = SimpleNamespace(  # type: ignore[assignment]
        assignment=SimpleNamespace(by_tp=by_tp, parked={}), writer=writer, txn=None)
    dp._consumer = DataConsumer(Seeks())  # type: ignore[arg-type]
    if stream:  # a transactional batch's streams, without the transaction's checks
        dp._stream = lambda owned, general: (  # type: ignore[method-assign]
            None if general else writer.open_stream(owned, producer))
    return dp, producer


def _data(version: str, t: int, job_headers: list[Any]) -> list[Any]:
    return [*job_headers, *TaggedRecord(version=version, event_time=t, watermark=t - 1000,
                                        batch=1).to_headers()]


ODD_HEADERS = [
    [(VERSION, b"blue"), (EVENT_TIME, b"12x"), (WATERMARK, b"1"), (BATCH, b"1")],
    [(VERSION, b"blue"), (EVENT_TIME, b""), (WATERMARK, b"1"), (BATCH, b"1")],
    [(VERSION, None), (EVENT_TIME, b"5"), (WATERMARK, b"1"), (BATCH, b"1")],
    [(KIND, b"data"), (VERSION, b"blue"), (EVENT_TIME, b"5"), (WATERMARK, b"1"),
     (BATCH, b"1")],
    [(VERSION, b"blue"), (EVENT_TIME, b"1" * 25), (WATERMARK, b"1"), (BATCH, b"1")],
    [(EVENT_TIME, b"5"), (VERSION, b"blue"), (WATERMARK, b"1"), (BATCH, b"1")],
    [("x", b"1")],
    [],
    # heartbeats in other shapes than the tagger's: valid (the interpreted path reads them), or not
    [(VERSION, b"blue"), (KIND, b"heartbeat"), (WATERMARK, b"5"), (BATCH, b"1"), ("x", b"1")],
    [(KIND, b"heartbeat"), (VERSION, b"green"), (WATERMARK, b"5"), (BATCH, b"1")],
    [(VERSION, b"blue"), (KIND, b"heartbeat"), (BATCH, b"1")],
    [(VERSION, b"blue"), (KIND, b"heartbeat"), (WATERMARK, b"9" * 25), (BATCH, b"1")],
    [(VERSION, b"blue"), (KIND, b"heartbeaT"), (WATERMARK, b"5"), (BATCH, b"1")],
    [(VERSION, b"blue"), (KIND, b"heartbeat"), (WATERMARK, b"5"), (BATCH, b"")],
    [(VERSION, b"blue"), (KIND, b"heartbeat"), (WATERMARK, b"-5"), (BATCH, b"1")],
]


@st.composite
def records(draw: Any, n: int) -> list[dict[str, Any]]:
    out = []
    t = T0
    for _ in range(n):
        kind = draw(st.sampled_from(["data"] * 12 + ["beat", "odd", "error", "poison", "old",
                                                    "replay", "replay"]))
        t += draw(st.integers(-3000, 4000))
        earlier = [r for r in out if r["kind"] == "data"]
        if kind == "replay" and earlier:  # the same record again (a job's replay): a duplicate
            again = dict(draw(st.sampled_from(earlier)))
            again.update(topic=draw(st.sampled_from(RAW)), p=draw(st.sampled_from(PARTS)))
            out.append(again)
            continue
        out.append({
            "kind": kind, "t": t,
            "version": draw(st.sampled_from(["blue", "green", "blue", "green", "violet"])),
            "topic": draw(st.sampled_from(RAW)), "p": draw(st.sampled_from(PARTS)),
            "key": draw(st.none() | st.sampled_from([b"k1", b"k2", b"k3", b"k4"])
                        | st.binary(max_size=12)),
            "value": draw(st.sampled_from([b"v1", b"v2", None, b""])),
            "job": draw(st.sampled_from([[], [("trace", b"1")], [("trace", None)]])),
            "odd": draw(st.sampled_from(ODD_HEADERS)),
        })
    return out


def _messages(recs: list[dict[str, Any]], offsets: dict[tuple[str, int], int]) -> list[Message]:
    msgs = []
    for r in recs:
        tp = (r["topic"], r["p"])
        if r["kind"] == "error":
            msgs.append(Message(topic=r["topic"], partition=r["p"],
                                error=KafkaError(KafkaError._PARTITION_EOF)))
            continue
        off = offsets[tp] = offsets.get(tp, -1) + 1
        written = r["t"] + 10
        if r["kind"] == "beat":
            hdrs = heartbeat_headers(r["version"], r["t"] - 2000, 1)
        elif r["kind"] == "odd":
            hdrs = r["odd"]
        else:  # data, replay (without an earlier record), poison, old
            t = r["t"] + (10 * TOLERANCE if r["kind"] == "poison" else 0)
            t = t - 3 * RETENTION if r["kind"] == "old" else t
            hdrs = _data(r["version"], t, r["job"])
        msgs.append(Message(topic=r["topic"], partition=r["p"], offset=off, key=r["key"],
                            value=r["value"], headers=hdrs, timestamp=(1, written)))
    return msgs


def _state(dp: DataPath, producer: Recorder) -> dict[str, Any]:
    out: dict[str, Any] = {"sent": list(producer.sent), "polls": producer.polls,
                           "queue": list(dp._parts.writer.queue),
                           "held": {k: (s.held, s.live)
                                    for k, s in dp._parts.writer.streams.items()},
                           "seeks": list(dp._consumer.client.seeks)}  # type: ignore[attr-defined]
    for key, o in sorted(dp.owned.items()):
        r, d = o.router, o.durability
        out[f"{key}"] = {
            "snapshot": r.snapshot(), "counters": r.counters, "paused": r.paused,
            "held": [(h.version, h.event_time, h.key, h.value, h.ref.offset) for h in r.held],
            "pending": dict(o.store.unflushed), "disk": (o.store.disk_reads,
                                                        o.store.false_positives),
            "dur": (d.next_offsets, d.out_pos, d.queued, d.undelivered, d.dirty, d.skip),
            "bound": (sorted(o.bound.topics), list(o.bound.pending)),
        }
    return out


def _end_batch(dp: DataPath) -> None:
    dp._parts.writer.end_streams()
    dp._parts.writer.queue = []
    for o in dp.owned.values():
        o.durability.batch_done()
        o.store.flush()


HALF_GREEN = Canary(version="green", share=0.5)  # keys k1, k3 and k4 of the records above
PLANS: list[list[tuple[int | None, str, Canary | None]]] = [
    [(None, "blue", None)],
    [(None, "blue", None), (T0 + 20_000, "green", None)],
    [(None, "green", None), (T0 + 5_000, "blue", None), (T0 + 30_000, "green", None)],
    [(None, "blue", None), (T0 + 10_000, "blue", HALF_GREEN)],
    [(None, "blue", HALF_GREEN)],
    # a canary rollout's steps: 5%, 25%, then every key; and one rolled back at 25%
    [(None, "blue", None), (T0 + 5_000, "blue", Canary(version="green", share=0.05)),
     (T0 + 15_000, "blue", Canary(version="green", share=0.25))],
    [(None, "blue", None), (T0 + 5_000, "blue", Canary(version="green", share=0.05)),
     (T0 + 15_000, "blue", Canary(version="green", share=0.25)), (T0 + 25_000, "green", None)],
    [(None, "blue", None), (T0 + 5_000, "blue", Canary(version="green", share=0.25)),
     (T0 + 25_000, "blue", None)],
    [(None, "green", Canary(version="blue", share=1.0))],
]


def _plan(epoch: int, segments: list[tuple[int | None, str, Canary | None]]) -> CutoverPlan:
    return CutoverPlan(route="r", epoch=epoch, segments=[
        Segment(from_event_time=t, primary=v, canary=c) for t, v, c in segments])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(records(60), min_size=1, max_size=4),
       plans=st.lists(st.sampled_from([None, *range(len(PLANS))]), min_size=4, max_size=4),
       ordered=st.booleans(), max_held=st.sampled_from([3, 1000]),
       identity=st.sampled_from(["record", "key_event_time"]), stream=st.booleans(),
       refuse=st.sets(st.integers(0, 60), max_size=3), fail=st.sets(st.integers(0, 80),
                                                                     max_size=1),
       skip=st.sets(st.integers(0, 20), max_size=3))
def test_the_compiled_path_decides_as_the_interpreted_one(
        batches: list[list[dict[str, Any]]], plans: list[int | None], ordered: bool,
        max_held: int, identity: str, stream: bool, refuse: set[int], fail: set[int],
        skip: set[int]) -> None:
    roots = [Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())]
    try:
        worlds = [_world(root, ordered=ordered, max_held=max_held, identity=identity,
                         stream=stream, refuse=refuse, fail=fail) for root in roots]
        for dp, _ in worlds:  # raw records already in the output log (a takeover's read-back)
            dp.owned[("r", 0)].durability.skip.update((RAW[0], o) for o in skip)
        offsets: dict[tuple[str, int], int] = {}
        epoch = 0
        for b, recs in enumerate(batches):
            msgs = _messages(recs, offsets)
            if plans[b] is not None:
                epoch += 1
                plan = _plan(epoch, PLANS[plans[b]])
                for dp, _ in worlds:
                    dp._apply_everywhere(plan)
            (a, pa), (c, pc) = worlds
            # Both paths start from the same versions known: a version's first sighting takes
            # the general path (cutover.headers learns it there), and queues its forward
            # where a known version's is streamed. Without this, the compiled side always saw
            # the versions the interpreted side had just learned.
            known = dict(hdr.KNOWN_VERSIONS)
            a._handle_all(list(msgs))
            hdr.KNOWN_VERSIONS.clear()
            hdr.KNOWN_VERSIONS.update(known)
            compiled.CompiledLoop(c._handle_all, c._run_for).handle(list(msgs))
            assert _state(c, pc) == _state(a, pa), f"batch {b}"
            for dp, _ in worlds:
                _end_batch(dp)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def _warm_world(tmp_path: Path, segments: list[tuple[int | None, str, Canary | None]],
                ordered: bool, stream: bool = False) -> tuple[DataPath, Recorder]:
    """A world whose versions are known and whose plan is ``segments``, its first batch over
    (a fresh stream follows)."""
    dp, producer = _world(tmp_path, ordered=ordered, max_held=1000, identity="record",
                          stream=stream, refuse=set(), fail=set())
    warm = _messages([{"kind": "data", "t": T0, "version": v, "topic": RAW[0], "p": 0,
                       "key": b"w", "value": v.encode(), "job": [], "odd": []}
                      for v in ("blue", "green")], {})
    dp._handle_all(warm)  # the versions become known to the header recognizer
    dp._apply_everywhere(_plan(1, segments))
    _end_batch(dp)
    return dp, producer


def test_the_compiled_path_takes_the_common_case(tmp_path: Path) -> None:
    """The comparison above must not pass because the compiled path declines everything:
    on a plain stream of both versions' data it decides every record itself."""
    dp, producer = _warm_world(tmp_path, PLANS[0], ordered=False, stream=True)
    msgs = _messages([{"kind": "data", "t": T0 + i, "version": ("blue", "green")[i % 2],
                       "topic": RAW[0], "p": 0, "key": b"k%d" % i, "value": b"v",
                       "job": [], "odd": []} for i in range(200)], {(RAW[0], 0): 1})
    r = dp.owned[("r", 0)].router
    before, sent = r.counters.forwarded, len(producer.sent)
    run = compiled.make_run(dp.owned[("r", 0)], RAW[0], dp._stream(dp.owned[("r", 0)], False),
                            dp._parts.writer.queue)
    assert run.scan(msgs, 0) == len(msgs)
    assert r.counters.forwarded - before == 100
    assert r.counters.suppressed == {"green": 101}  # the warm-up's one, then 100
    # the newest is held back (router.durability.inline_output)
    assert len(producer.sent) - sent == 99



def test_heartbeats_that_close_nothing_stay_in_the_compiled_run(tmp_path: Path) -> None:
    """The tagger writes a heartbeat on every partition after each micro-batch. One that can
    close no handover only raises its version's watermark (never lowers it), and the run goes
    on past it."""
    dp, _ = _warm_world(tmp_path, PLANS[0], ordered=True)
    owned = dp.owned[("r", 0)]
    recs: list[dict[str, Any]] = []
    for i in range(40):
        recs.append({"kind": "data", "t": T0 + 100 * i, "version": ("blue", "green")[i % 2],
                     "topic": RAW[0], "p": 0, "key": b"k%d" % i, "value": b"v", "job": [],
                     "odd": []})
        if i % 10 == 9:  # both versions' heartbeats; the last green one goes back in time
            back = 50_000 if i == 39 else 0
            recs += [{"kind": "beat", "t": T0 + 100 * i, "version": "blue", "topic": RAW[0],
                      "p": 0, "key": None, "value": None, "job": [], "odd": []},
                     {"kind": "beat", "t": T0 + 100 * i - back, "version": "green",
                      "topic": RAW[0], "p": 0, "key": None, "value": None, "job": [],
                      "odd": []}]
    msgs = _messages(recs, {(RAW[0], 0): 1})
    run = compiled.make_run(owned, RAW[0], None, dp._parts.writer.queue)
    assert run.scan(msgs, 0) == len(msgs)
    assert owned.router.watermarks == {"blue": T0 + 3900 - 2000, "green": T0 + 2900 - 2000}
    assert owned.durability.next_offsets[RAW[0]] == len(msgs) + 2
    assert owned.router.counters.forwarded == 1 + 20


def test_a_heartbeat_that_may_close_a_handover_ends_the_run_before_it(tmp_path: Path) -> None:
    """Closing a boundary may release held records: the interpreted path's work. The run
    stops at such a heartbeat with nothing of it applied."""
    dp, _ = _warm_world(tmp_path, PLANS[1], ordered=True)
    owned = dp.owned[("r", 0)]
    beat = {"kind": "beat", "t": T0 + 30_000, "version": "blue", "topic": RAW[0], "p": 0,
            "key": None, "value": None, "job": [], "odd": []}
    msgs = _messages([beat], {(RAW[0], 0): 1})
    run = compiled.make_run(owned, RAW[0], None, dp._parts.writer.queue)
    assert owned.router.closed_upto == 0
    assert run.scan(msgs, 0) == 0
    assert "blue" not in owned.router.watermarks
    dp._handle_all(msgs)  # the interpreted path closes it
    assert owned.router.closed_upto == 1


def test_a_canary_plan_stays_compiled_and_gives_each_key_its_primary(tmp_path: Path) -> None:
    """A record's primary under a canary depends on its key: the compiled run reads its
    bucket, from the scan after the plan arrives (even in the middle of a batch), decides
    every record itself and gives each key its primary (a record without a key: the
    segment's primary)."""
    dp, _ = _warm_world(tmp_path, PLANS[0], ordered=False)
    owned = dp.owned[("r", 0)]
    run = compiled.make_run(owned, RAW[0], None, dp._parts.writer.queue)
    keys = [b"k1", b"k2", b"k3", b"k4", None]
    recs = [{"kind": "data", "t": T0 + 20_000 + i, "version": v, "topic": RAW[0], "p": 0,
             "key": k, "value": b"v%d" % i, "job": [], "odd": []}
            for i, k in enumerate(keys) for v in ("blue", "green")]
    msgs = _messages(recs, {(RAW[0], 0): 1})
    dp._apply_everywhere(_plan(2, PLANS[4]))  # after the run was made
    assert run.scan(msgs, 0) == len(msgs)
    queue = dp._parts.writer.queue
    forwarded = [(key, dict(headers)[VERSION]) for _, _, key, _, headers, _ in queue]
    assert forwarded == [(b"k1", b"green"), (b"k2", b"blue"), (b"k3", b"green"),
                         (b"k4", b"green"), (None, b"blue")]
