"""The compiled per-record path (router/native/_fastpath.c): which records it decides, how it is set
up.

Why: around a routing rule of a few microseconds, the interpreter's per-record work is what
limits the router's throughput (docs/decisions/008-compiled-per-record-path.md). The common case
is narrow: a
run of one raw partition's well-formed data records, each either not the primary for its
event time (suppressed) or the primary's and new to the dedup store (forwarded). That case is
written in C over the same Python objects (the partition's rule, its dedup store, its
durability, its output stream), and so are the tagger's heartbeats that close no handover
(they only raise a version's watermark; one per partition after each micro-batch); every other
record (a heartbeat that may close a boundary, held, poison, duplicates, a
filter "maybe", dead letters, shadows, a partition paused over max_held) goes through the
interpreted loop, :meth:`router.worker.datapath.DataPath._handle_all`, which stays the definition of
the rule. tests/unit/test_compiled_path.py runs both on the same generated records and compares
every output and every piece of state.

It reads consumed records without converting their headers where it can: the data consumer
and the transactional producers load this extension's own file as a librdkafka plugin
(:func:`client_tap`; router/native/_plugin.h), through librdkafka's public interceptor API.
librdkafka hands each consumed record to it before confluent-kafka wraps it in a Message; a
record in the tagger's data layout is kept (partition, offset, timestamp, event time, version,
a copy of its headers), and the run finds it again by (topic, partition, offset) read through
the Message's public accessors, so that a suppressed record builds no headers list, tuples or
timestamp tuple. A record not kept (another layout, a record read before the consume that kept
it) is read through the accessors. tests/integration/test_direct_reads.py compares the kept
records with the accessors on records a broker returned.

Forwards are produced straight into librdkafka (router/native/_produce.h) on the producer's
``rd_kafka_t`` that librdkafka gave the plugin when the client was created: the consumed
record's key and value bytes and its kept headers, plus ``bg.src``, without a Python object
or a delivery report. tests/integration/test_direct_produce.py reads a routed output back and
compares it with the raw records, byte for byte.

Where the plugin cannot be used (librdkafka's functions not found where confluent-kafka loaded
them, another version of it, or one that does not load plugins), clients are created without
it, records are read through the accessors and forwards go through ``Producer.produce``; the
start-up log says why.

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
names table against the Protocols (docs/decisions/024-the-native-boundary.md). No C reads
another package's struct: confluent-kafka's objects through their public methods, librdkafka
through its public API.

The extension is built by ``pip install`` when a C compiler is there (setup.py, optional);
without it, or with ``CUTOVER_COMPILED_PATH=0``, the router runs interpreted, and its start-up
log says which.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from confluent_kafka import KafkaException, Message, Producer, libversion

from cutover import headers as hdr
from cutover.kafka_types import DataMessage
from router.base.output_record import OutputRecord
from router.dedup.bloom import MASK_SHIFT, MASKS
from router.durability.inline_output import InlineStream
from router.durability.partition import Owned
from router.rule.identity import record_identity

if TYPE_CHECKING:
    from router.native._fastpath import Run as CRun
    from router.native._fastpath import Tap

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
        return "compiled" if PLUGIN is None else \
            f"compiled, reading records through their accessors and producing forwards " \
            f"through Producer.produce ({PLUGIN})"
    return "interpreted (turned off by CUTOVER_COMPILED_PATH=0)" if available() else \
        "interpreted (the compiled extension is not built: install with a C compiler)"


PLUGIN_PATHS = "plugin.library.paths"
TAP = "cutover.tap"  # the property the plugin accepts: which Tap a client is


def client_tap(conf: dict[str, Any], consumer: bool) -> Tap | None:
    """A Tap for the client about to be created with ``conf`` (router/native/_plugin.h), the
    plugin's two properties added to ``conf`` (after any plugin the operator gives); None,
    and ``conf`` unchanged, where the compiled path or the plugin is off. A producer's tap is
    then bound to it (``tap.bind(producer)``); a consumer's tap is begun before each
    consume(), in the thread that decides its records."""
    if PLUGIN is not None or not enabled():
        return None
    assert _fastpath is not None
    tap: Tap = _fastpath.Tap(consumer=consumer)
    mine = PLUGIN_FILE
    given = str(conf.get(PLUGIN_PATHS) or "")
    conf[PLUGIN_PATHS] = f"{given};{mine}" if given else mine
    conf[TAP] = tap.token
    return tap


def tapped_producer(conf: dict[str, Any]) -> Producer:
    """A Producer made with ``conf``, whose forwards the compiled path produces straight into
    its librdkafka handle where the plugin is on (its tap bound to it: router/native/_produce.h;
    the tap's slot lives as long as the client)."""
    tap = client_tap(conf, consumer=False)
    producer = Producer(conf)
    if tap is not None and tap.attached:  # else librdkafka refused the plugin's on_new (logged)
        tap.bind(producer)
    return producer


def _use_plugin() -> str | None:
    """Let clients load the plugin: librdkafka's functions from the library confluent-kafka's
    extension loaded, which must load this file as its plugin. None, or why not."""
    assert _fastpath is not None
    client = importlib.import_module("confluent_kafka.cimpl").__file__
    if client is None:
        return "confluent-kafka's extension has no file"
    reason: str | None = _fastpath.use_plugin(client=client, version=libversion()[1],
                                              plugin=PLUGIN_FILE)
    return reason


PLUGIN: str | None = "the compiled extension is not built"  # why clients load no plugin
PLUGIN_FILE = _fastpath.__file__ if _fastpath is not None else ""  # what they load

if _fastpath is not None:
    _fastpath.configure(known_versions=hdr.KNOWN_VERSIONS, masks=MASKS, mask_shift=MASK_SHIFT,
                        record_identity=record_identity, kafka_exception=KafkaException,
                        message_type=Message,
                        version=hdr.VERSION, event_time=hdr.EVENT_TIME,
                        watermark=hdr.WATERMARK, batch=hdr.BATCH, kind=hdr.KIND, src=hdr.SRC)
    PLUGIN = _use_plugin()


def make_run(owned: Owned, topic: str, stream: InlineStream | None,
             queue: list[OutputRecord], reads: Tap | None = None) -> Run:
    """The compiled run of ``owned``'s records of ``topic`` in this batch: forwards go to
    ``stream`` while it is live (transactions), else to the batch's ``queue``; ``reads``: the
    data consumer's tap, whose kept records it reads (:func:`client_tap`)."""
    assert _fastpath is not None
    rs = owned.route.settings
    # typed by _fastpath.pyi (the module object itself is untyped here): mypy checks the objects
    # passed against the Protocols there, the contract of what the C reads and writes
    run_type: type[CRun] = _fastpath.Run
    run = run_type(router=owned.router, store=owned.store, durability=owned.durability,
                   bound=owned.bound, identity=owned.route.identity, topic=topic,
                   partition=owned.partition, output=rs.output, stream=stream, queue=queue,
                   reads=reads)
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
