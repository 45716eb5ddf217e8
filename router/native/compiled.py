"""The compiled per-record path (router/native/_fastpath.c): which records it decides, how it is set
up.

Why: around a routing rule of a few microseconds, the interpreter's per-record work is what
limits the router's throughput (docs/decisions/008-compiled-per-record-path.md). The common case
is narrow: a
run of one raw partition's well-formed data records, each either not the primary for its
event time (suppressed) or the primary's and new to the dedup store (forwarded). That case is
written in C over the same Python objects (the partition's rule, its dedup store, its
durability, its output stream); every other record (heartbeats, held, poison, duplicates, a
filter "maybe", dead letters, shadows, a partition paused over max_held) goes through the
interpreted loop, :meth:`router.worker.datapath.DataPath._handle_all`, which stays the definition of
the rule. tests/unit/test_compiled_path.py runs both on the same generated records and compares
every output and every piece of state.

It reads consumed records directly where it can (``use_direct_reads``): confluent_kafka.Message's
fields from the object, and the headers from librdkafka before Python converts them, so that a
suppressed record costs no Python object. That rests on the Message layout of confluent-kafka
2.16, checked here on a constructed Message at import; if it differs, the accessors are used
and the start-up log says why. tests/integration/test_direct_reads.py compares the direct reads
with the accessors on records a broker returned.

It also produces forwards straight into librdkafka where it can (``use_direct_produce``,
router/native/_produce.h): the consumed record's key, value and librdkafka headers, plus ``bg.src``,
without a Python object or a delivery report, on the Producer layout of confluent-kafka 2.16,
checked here at import (the start-up log says why, if not).
tests/integration/test_direct_produce.py reads a routed output back and compares it with the
raw records, byte for byte.

A timeline with a per-key canary (cutover.key_primary) makes a record's primary depend on its
key: in a segment with a canary the compiled run reads the key's bucket (cutover.key_bucket,
the same BLAKE2b-64 in C) and decides by it, as the interpreted rule does; records of a
segment whose handover is not closed yet go to the interpreted rule, which holds only the keys
that move. The rule is read from the partition at every scan, so a plan applied in the middle
of a batch (one that waited for a re-read) is followed at once.

The boundary: the C reads, writes and calls only public names of the objects it is given, each
declared in a Protocol of router/native/_fastpath.pyi (RouterView, StoreView, DurabilityView,
BoundView, StreamView); :func:`make_run` passes the real objects through ``Run``'s stub type,
so mypy checks that they satisfy them, and tests/unit/test_native_boundary.py checks the C's
names table against the Protocols (docs/decisions/024-the-native-boundary.md). Only
confluent-kafka's Message and Producer structs are read by layout, as above.

The extension is built by ``pip install`` when a C compiler is there (setup.py, optional);
without it, or with ``CUTOVER_COMPILED_PATH=0``, the router runs interpreted, and its start-up
log says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from confluent_kafka import KafkaException, Message, Producer

from cutover import headers as hdr
from cutover.kafka_types import DataMessage
from router.base.output_record import OutputRecord
from router.dedup.bloom import MASK_SHIFT, MASKS
from router.durability.inline_output import InlineStream
from router.durability.partition import Owned
from router.rule.identity import record_identity

if TYPE_CHECKING:
    from router.native._fastpath import Run as CRun

_fastpath: ModuleType | None
try:
    from router.native import _fastpath
except ImportError:  # no C compiler when installed: the interpreted path
    _fastpath = None

ENV = "CUTOVER_COMPILED_PATH"


class Run(Protocol):
    """What the loop asks of a partition's run in a batch (router.native._fastpath.Run's scan)."""

    def scan(self, msgs: list[Message], start: int, /) -> int: ...


def available() -> bool:
    """The extension was built (and imports)."""
    return _fastpath is not None


def enabled() -> bool:
    """The router decides with the compiled path: built, and not turned off."""
    return _fastpath is not None and os.environ.get(ENV, "1") != "0"


def path_name() -> str:
    if enabled():
        if DIRECT_READS is not None:
            return f"compiled, reading records through their accessors ({DIRECT_READS})"
        return "compiled" if DIRECT_PRODUCE is None else \
            f"compiled, producing forwards through Producer.produce ({DIRECT_PRODUCE})"
    return "interpreted (turned off by CUTOVER_COMPILED_PATH=0)" if available() else \
        "interpreted (the compiled extension is not built: install with a C compiler)"


def _loaded_librdkafka() -> str | None:
    """The path of the librdkafka the client loaded (confluent-kafka's own copy, or the
    system's), from this process's memory map; None where there is none to read."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "librdkafka" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        return None
    return None


class _SampleFields(TypedDict):
    """The fields of the Message built to check the layout on."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def _use_direct_reads(rdkafka: str | None) -> str | None:
    """Turn on direct reads of consumed records (router/native/_message.h, ``CKMessage``), with
    librdkafka's functions from ``rdkafka`` (:func:`_loaded_librdkafka`): None, or why they stay
    off."""
    assert _fastpath is not None
    headers = [("cutover-layout", b"1")]
    fields: _SampleFields = {"topic": "cutover-layout-check", "partition": 7,
                             "offset": 123_456_789_012, "timestamp": 1_700_000_000_123}
    try:
        sample = Message(topic=fields["topic"], partition=fields["partition"],
                         offset=fields["offset"], headers=headers,
                         timestamp=(1, fields["timestamp"]), leader_epoch=5)
    except TypeError as exc:  # an older client: no Message constructor
        return f"confluent_kafka.Message cannot be constructed to check it: {exc}"
    reason: str | None = _fastpath.use_direct_reads(sample=sample, headers=headers,
                                                    rdkafka=rdkafka, **fields)
    return reason


DIRECT_READS: str | None = None   # why consumed records are read through their accessors
DIRECT_PRODUCE: str | None = None  # why forwards go through Producer.produce

if _fastpath is not None:
    _fastpath.configure(known_versions=hdr.KNOWN_VERSIONS, masks=MASKS, mask_shift=MASK_SHIFT,
                        record_identity=record_identity, kafka_exception=KafkaException,
                        message_type=Message,
                        version=hdr.VERSION, event_time=hdr.EVENT_TIME,
                        watermark=hdr.WATERMARK, batch=hdr.BATCH, kind=hdr.KIND, src=hdr.SRC)
    _rdkafka = _loaded_librdkafka()   # the process's memory map, read once
    DIRECT_READS = _use_direct_reads(_rdkafka)
    DIRECT_PRODUCE = _fastpath.use_direct_produce(producer_type=Producer, rdkafka=_rdkafka)


def make_run(owned: Owned, topic: str, stream: InlineStream | None,
             queue: list[OutputRecord]) -> Run:
    """The compiled run of ``owned``'s records of ``topic`` in this batch: forwards go to
    ``stream`` while it is live (transactions), else to the batch's ``queue``."""
    assert _fastpath is not None
    rs = owned.route.settings
    # typed by _fastpath.pyi (the module object itself is untyped here): mypy checks the objects
    # passed against the Protocols there, the contract of what the C reads and writes
    run_type: type[CRun] = _fastpath.Run
    run = run_type(router=owned.router, store=owned.store, durability=owned.durability,
                   bound=owned.bound, identity=owned.route.identity, topic=topic,
                   partition=owned.partition, output=rs.output, stream=stream, queue=queue)
    return run


class CompiledLoop:
    """Decides a consumed batch with compiled runs: each partition's stretch of records as far
    as they are the common case; every record a run leaves, and every stretch no run can
    serve, goes to ``interpreted`` (router.worker.datapath.DataPath._handle_all). ``run_for(tp)``
    makes the run of raw partition ``tp`` for the batch (None: interpreted)."""

    def __init__(self, interpreted: Callable[[list[Message]], None],
                 run_for: Callable[[tuple[str, int]], Run | None]) -> None:
        self.interpreted = interpreted
        self.run_for = run_for
        self._runs: dict[tuple[str, int], Run | None] = {}

    def handle(self, msgs: list[Message]) -> None:
        runs = self._runs
        runs.clear()  # a run holds the batch's output stream and queue
        i, n = 0, len(msgs)
        while i < n:
            msg = msgs[i]
            run = None
            if msg.error() is None:
                if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call
                    msg = cast(DataMessage, msg)
                tp = (msg.topic(), msg.partition())
                if tp in runs:
                    run = runs[tp]
                else:
                    run = runs[tp] = self.run_for(tp)
            j = run.scan(msgs, i) if run is not None else -1
            if j < 0:
                j = stretch_end(msgs, i)
            elif j == i:
                j = i + 1
            else:
                i = j
                continue
            self.interpreted(msgs[i:j])
            i = j


def stretch_end(msgs: list[Message], start: int) -> int:
    """One past the last record of the stretch of ``msgs[start]``'s partition (an error record
    is a stretch of its own)."""
    first = msgs[start]
    if first.error() is not None:
        return start + 1
    topic, p = first.topic(), first.partition()
    i = start + 1
    n = len(msgs)
    while i < n:
        m = msgs[i]
        if m.error() is not None or m.partition() != p or m.topic() != topic:
            break
        i += 1
    return i
