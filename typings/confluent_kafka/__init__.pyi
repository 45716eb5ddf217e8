# Types of the part of confluent-kafka the project uses (cutover/, router/, spark_tagger/,
# testground/ and the deploy/ programs mypy checks): the consumer, the producer, their
# messages, topic partitions, errors and the module's version functions. Anything else the
# project starts to use is added here; a name that is not here is an error, not Any.
#
# The signatures follow confluent-kafka's own (its cimpl.pyi, and the C extension's code and
# docstrings where the two differ) for the versions pyproject.toml allows,
# confluent-kafka>=2.13; nothing here is newer than 2.13. Where confluent-kafka's own types
# are wider than what its clients hand back (a consumed message's headers, a KafkaException's
# argument), these are narrowed to what the clients hand back, and the comments say why.

import builtins
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, TypeAlias

from confluent_kafka.admin import ClusterMetadata

def version() -> str: ...
def libversion() -> tuple[str, int]: ...

OFFSET_BEGINNING: int
OFFSET_END: int

class KafkaError:
    # One constant per librdkafka error code (read from librdkafka at import); those the
    # project names. Negative codes (leading underscore) are the client's own errors.
    _ALL_BROKERS_DOWN: int
    _AUTHENTICATION: int
    _AUTO_OFFSET_RESET: int
    _DESTROY_BROKER: int
    _FATAL: int
    _FENCED: int
    _PARTITION_EOF: int
    _SSL: int
    _STATE: int
    _TIMED_OUT: int
    _TRANSPORT: int
    _UNKNOWN_PARTITION: int
    _WAIT_COORD: int
    COORDINATOR_LOAD_IN_PROGRESS: int
    COORDINATOR_NOT_AVAILABLE: int
    GROUP_AUTHORIZATION_FAILED: int
    INVALID_PRODUCER_EPOCH: int
    LEADER_NOT_AVAILABLE: int
    MSG_SIZE_TOO_LARGE: int
    NOT_COORDINATOR: int
    NOT_ENOUGH_REPLICAS: int
    NOT_LEADER_FOR_PARTITION: int
    OFFSET_OUT_OF_RANGE: int
    PRODUCER_FENCED: int
    ILLEGAL_GENERATION: int
    UNKNOWN_MEMBER_ID: int
    FENCED_INSTANCE_ID: int
    REQUEST_TIMED_OUT: int
    TOPIC_AUTHORIZATION_FAILED: int
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: int
    TRANSACTION_COORDINATOR_FENCED: int
    UNKNOWN_TOPIC_OR_PART: int

    # The C extension's keywords (cimpl.pyi names the first one "code", the code "error").
    def __init__(self, error: int, reason: builtins.str | None = None, fatal: bool = False,
                 retriable: bool = False, txn_requires_abort: bool = False) -> None: ...
    def code(self) -> int: ...
    def str(self) -> builtins.str: ...
    def fatal(self) -> bool: ...
    def retriable(self) -> bool: ...
    def txn_requires_abort(self) -> bool: ...

class KafkaException(Exception):
    # The client raises it with the KafkaError as its one argument, from the C extension and
    # from the admin client's futures alike (the docs: "use exception.args[0] to extract the
    # KafkaError object"); the project raises it so too. cimpl.pyi takes any arguments, and
    # so types args[0] as Any.
    def __init__(self, error: KafkaError, /) -> None: ...
    args: tuple[KafkaError]

# A message's headers as the client hands them back: librdkafka's headers become a list of
# (name, value) pairs, value None for a header without one. (A Message built in Python keeps
# the object it was given; the project gives it such a list.)
_ReadHeaders: TypeAlias = list[tuple[str, bytes | None]]

# What produce() takes: a list of (name, value) pairs or a dict (cimpl.pyi's HeadersType). The
# client copies them into librdkafka's headers and keeps nothing, so a list of narrower pairs is
# taken as well.
_ProducedHeaders: TypeAlias = (list[tuple[str, str | bytes | None]]
                               | list[tuple[str, bytes | None]]
                               | dict[str, str | bytes | None])

class Message:
    # Every accessor of a consumed record can be None on some message: an error (error() is
    # not None) may have no topic, partition or offset, a delivery report of a failed produce
    # has no offset, key and value are None for a null key or value, headers() is None for a
    # record without headers. cutover.kafka_types.DataMessage is the view of a consumed record
    # whose error() is None.
    def __init__(self, topic: str | None = None, partition: int = -1, offset: int = -1001,
                 key: bytes | None = None, value: bytes | None = None,
                 headers: _ReadHeaders | list[tuple[str, bytes]] | None = None,
                 error: KafkaError | None = None, timestamp: tuple[int, int] | None = None,
                 latency: float = -1, leader_epoch: int = -1) -> None: ...
    def error(self) -> KafkaError | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> _ReadHeaders | None: ...
    def timestamp(self) -> tuple[int, int]: ...  # (timestamp type, milliseconds)

class ConsumerGroupState(Enum):
    UNKNOWN = 0
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5

class TopicPartition:
    def __init__(self, topic: str, partition: int = -1, offset: int = -1001,
                 metadata: str | None = None, leader_epoch: int | None = None) -> None: ...
    topic: str
    partition: int
    offset: int
    error: KafkaError | None

class TopicCollection:
    def __init__(self, topic_names: list[str]) -> None: ...

class Node:
    id: int

_DeliveryCallback: TypeAlias = Callable[[KafkaError | None, Message], None]
_RebalanceCallback: TypeAlias = Callable[[Consumer, list[TopicPartition]], None]

class Consumer:
    # The configuration, a dict: librdkafka's properties, callbacks (error_cb, ...) and a
    # logger, so its values are Any, as in cimpl.pyi.
    def __init__(self, config: dict[str, Any], /) -> None: ...
    def subscribe(self, topics: list[str], on_assign: _RebalanceCallback | None = None,
                  on_revoke: _RebalanceCallback | None = None,
                  on_lost: _RebalanceCallback | None = None) -> None: ...
    def poll(self, timeout: float = -1) -> Message | None: ...
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def unassign(self) -> None: ...
    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...
    def assignment(self) -> list[TopicPartition]: ...
    # The asynchronous commit of offsets (cimpl.pyi's overloads: a synchronous one returns
    # the committed partitions).
    def commit(self, *, offsets: list[TopicPartition],
               asynchronous: Literal[True] = True) -> None: ...
    # Raises KafkaException when the offsets cannot be had (the docstring's "None on timeout"
    # is not what the code does).
    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]: ...
    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float = -1) -> list[TopicPartition]: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...
    # The group metadata a transaction's offsets are sent with: opaque, serialized by the client.
    def consumer_group_metadata(self) -> bytes: ...
    def memberid(self) -> str | None: ...
    def close(self) -> None: ...

class Producer:
    # The configuration, a dict: librdkafka's properties, callbacks (error_cb, ...) and a
    # logger, so its values are Any, as in cimpl.pyi.
    def __init__(self, config: dict[str, Any], /) -> None: ...
    def produce(self, topic: str, value: str | bytes | None = None,
                key: str | bytes | None = None, partition: int = -1,
                callback: _DeliveryCallback | None = None,
                on_delivery: _DeliveryCallback | None = None, timestamp: int = 0,
                headers: _ProducedHeaders | None = None) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def flush(self, timeout: float = -1) -> int: ...
    def purge(self, in_queue: bool = True, in_flight: bool = True,
              blocking: bool = True) -> None: ...
    def init_transactions(self, timeout: float = -1) -> None: ...
    def begin_transaction(self) -> None: ...
    def commit_transaction(self, timeout: float = -1) -> None: ...
    def abort_transaction(self, timeout: float = -1) -> None: ...
    def send_offsets_to_transaction(self, positions: list[TopicPartition],
                                    group_metadata: bytes, timeout: float = -1) -> None: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata: ...
