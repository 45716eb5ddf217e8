"""Types of the compiled per-record path (router/native/_fastpath.c; router.native.compiled
says why)."""

from array import array
from collections.abc import Callable, Collection
from typing import Protocol

from confluent_kafka import KafkaException, Message, Producer

from router.base.output_record import OutputRecord

# The contract of the native boundary: every attribute and method _fastpath.c reads, writes or
# calls on a Python object passed to it is declared in one of these Protocols (the names table
# in PyInit__fastpath; tests/unit/test_native_boundary.py checks the two agree, and that no
# name is private). A name the C only reads is a read-only property here; one it writes is an
# attribute. Run.__init__ is typed with them, so mypy checks, where router/native/compiled.py
# makes a Run, that the real objects (PartitionRouter, DedupStore, Durability, HeldBound,
# InlineStream) still have them. Message accessors and Producer methods are confluent-kafka's.


class KeyRuleView(Protocol):
    """One segment's rule with a canary (cutover.key_primary.KeyRule)."""
    @property
    def canary(self) -> str | None: ...
    @property
    def buckets(self) -> int: ...

class CountersView(Protocol):
    """A partition's counters (router.rule.decision.PartitionCounters)."""
    forwarded: int
    @property
    def suppressed(self) -> dict[str, int]: ...

class RouterView(Protocol):
    """A partition's rule (router.rule.decision.PartitionRouter), read at every scan."""
    horizon: int | None
    @property
    def primaries(self) -> tuple[str, ...]: ...
    @property
    def bounds(self) -> tuple[int, ...]: ...
    @property
    def key_rules(self) -> tuple[KeyRuleView, ...] | None: ...
    @property
    def tolerance(self) -> int: ...
    @property
    def retention_ms(self) -> int: ...
    @property
    def ordered(self) -> bool: ...
    @property
    def closed_upto(self) -> int: ...
    @property
    def watermarks(self) -> dict[str, int]: ...
    @property
    def counters(self) -> CountersView: ...

class StoreView(Protocol):
    """A partition's dedup store (router.dedup.store.DedupStore): the identities added since
    its last flush (the C adds its forwards' there) and its live filter buckets' bits."""
    @property
    def unflushed(self) -> dict[bytes, int]: ...
    @property
    def live_bits(self) -> list[array[int]]: ...

class DurabilityView(Protocol):
    """A partition's positions (router.durability.resume.Durability)."""
    dirty: bool
    out_pos: int
    queued: int
    @property
    def skip(self) -> set[tuple[str, int]]: ...
    @property
    def next_offsets(self) -> dict[str, int]: ...
    @property
    def undelivered(self) -> dict[str, int]: ...

class BoundView(Protocol):
    """A partition's paused and re-reading topics (router.rule.held_bound.HeldBound)."""
    @property
    def topics(self) -> Collection[object]: ...

class StreamView(Protocol):
    """A partition's transactional output stream (router.durability.inline_output.InlineStream)."""
    held: OutputRecord | None
    @property
    def live(self) -> bool: ...
    @property
    def producer(self) -> Producer: ...
    def failed(self, held: OutputRecord, exc: KafkaException, /) -> None: ...

def configure(*, known_versions: dict[bytes, str], masks: list[int], mask_shift: int,
              record_identity: Callable[[bytes | None, bytes | None, int], bytes],
              kafka_exception: type[BaseException], message_type: type[Message],
              version: str, event_time: str,
              watermark: str, batch: str, kind: str, src: str) -> None: ...

def use_plugin(*, client: str, version: int, plugin: str) -> str | None: ...

def produced_directly() -> int:
    """How many forwards this process produced straight into librdkafka."""

class Tap:
    """A client's view through librdkafka's interceptors (router/native/_plugin.h)."""
    def __init__(self, *, consumer: bool = False) -> None: ...
    @property
    def token(self) -> str: ...
    @property
    def attached(self) -> bool: ...
    @property
    def counts(self) -> dict[str, int]:
        """recorded / dropped by on_consume, read by compiled runs."""
    def begin(self) -> None: ...
    def bind(self, client: object, /) -> None: ...

def envelope(tap: Tap, topic: str, partition: int, offset: int, /
             ) -> tuple[str | None, int, int, list[tuple[str, bytes | None]]] | None:
    """(version or None, event time, timestamp, headers) kept of a consumed record, or None."""

def record_identity(key: bytes | None, value: bytes | None, event_time: int, /) -> bytes: ...
def key_bucket(key: bytes, /) -> int: ...

class Run:
    def __init__(self, *, router: RouterView, store: StoreView, durability: DurabilityView,
                 bound: BoundView, identity: Callable[[bytes | None, bytes | None, int], bytes],
                 topic: str, partition: int, output: str, stream: StreamView | None,
                 queue: list[OutputRecord], reads: Tap | None = None) -> None: ...
    def scan(self, msgs: list[Message], start: int, /) -> int:
        """Decide ``msgs[start:]`` while they are this partition's and the common case;
        return the index of the first record left to the interpreted path, or -1 when
        the partition cannot be served compiled now (paused, re-reading, no plan yet)."""
