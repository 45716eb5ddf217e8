"""Types of the compiled per-record path (router/native/_fastpath.c; router.native.compiled
says why)."""

from collections.abc import Callable
from typing import Any

from confluent_kafka import Message, Producer

def configure(*, known_versions: dict[bytes, str], masks: list[int], mask_shift: int,
              record_identity: Callable[[bytes | None, bytes | None, int], bytes],
              kafka_exception: type[BaseException], message_type: type[Message],
              version: str, event_time: str,
              watermark: str, batch: str, kind: str, src: str) -> None: ...

def use_direct_reads(*, sample: Message, topic: str, partition: int, offset: int,
                     timestamp: int, headers: list[tuple[str, bytes]],
                     rdkafka: str | None) -> str | None: ...

def use_direct_produce(*, producer_type: type[Producer], rdkafka: str | None) -> str | None: ...

def produced_directly() -> int:
    """How many forwards this process produced straight into librdkafka."""

def envelope(msg: Message, /) -> tuple[tuple[str, int] | None, int, int, int]:
    """((version, event time) or None, offset, partition, timestamp), read directly."""

def record_identity(key: bytes | None, value: bytes | None, event_time: int, /) -> bytes: ...
def key_bucket(key: bytes, /) -> int: ...

class Run:
    def __init__(self, *, router: Any, store: Any, durability: Any, bound: Any,
                 identity: Callable[[bytes | None, bytes | None, int], bytes], topic: str,
                 partition: int, output: str, stream: Any, queue: list[Any]) -> None: ...
    def scan(self, msgs: list[Message], start: int, /) -> int:
        """Decide ``msgs[start:]`` while they are this partition's and the common case;
        return the index of the first record left to the interpreted path, or -1 when
        the partition cannot be served compiled now (paused, re-reading, no plan yet)."""
