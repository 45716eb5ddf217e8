"""Small confluent-kafka helpers shared by the router and the CLI: client settings with the
operator's SASL/TLS pass-through, waiting for the broker with backoff, reading a partition to
its end (the Fetch high watermark, which is right on every broker)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from cutover.kafka_errors import (
    ClientErrors,
    denial,
    explain_connect_failure,
    list_topics,
    topic_denial,
)
from cutover.kafka_types import DataMessage
from cutover.secret_refs import resolve_secrets
from cutover.settings import RouterSettings

log = logging.getLogger("cutover.router")

# Properties only a consumer understands; librdkafka warns when a producer or admin gets them.
_CONSUMER_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
                  "group.", "auto.offset.reset", "enable.auto.commit", "fetch.",
                  "partition.assignment.strategy", "isolation.level", "queued.", "max.partition")


class BrokerUnavailable(RuntimeError):
    """The broker did not answer; the message says where and why."""


class AccessDenied(BrokerUnavailable):
    """The broker refused the configured principal a right; the message names it."""


# Topics missing from a listing may be ones this principal may not describe.
_ROLE_RIGHTS = 'the rights its role has in docs/security.md, "Access control"'


METADATA_REFRESH_MS = 2000   # a producer's periodic refresh of its topics' leaders


def fatal_behind(exc: SystemError) -> KafkaException | None:
    """The client's fatal error behind a ``SystemError`` from one of its calls, or None.

    confluent-kafka raises a client's fatal error (e.g. a transactional producer fenced by a
    newer one) from inside the call that serves the client's callbacks (``flush``, ``poll``,
    ``consume``): it sets a KafkaException and yields. When librdkafka serves a log line in the
    same call, the ``logger`` callback runs with that exception still set, and the call ends in
    ``SystemError: <class 'logging.LogRecord'> returned a result with an exception set``, the
    KafkaException as its cause. The fatal error is what happened, and is handled as such
    (a resumed zombie worker met it: the chaos soak, docs/soak.md)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc.__context__
    return cause if isinstance(cause, KafkaException) else None


@contextlib.contextmanager
def fatal_errors_raised() -> Iterator[None]:
    """Around calls into the clients: a fatal error that reaches here as a SystemError
    (:func:`fatal_behind`) is raised as the KafkaException it is, for the caller's handling of
    client errors; any other SystemError is left as it is."""
    try:
        yield
    except SystemError as exc:
        fatal = fatal_behind(exc)
        if fatal is None:
            raise
        raise fatal from exc


def base_conf(bootstrap: str, kafka: dict[str, Any] | None = None) -> dict[str, Any]:
    """Client settings: ``kafka:`` pass-through with its secret references resolved."""
    return {"bootstrap.servers": bootstrap, "logger": log, "log_level": 3,
            **resolve_secrets(kafka or {})}


def client_conf(settings: RouterSettings, role: str = "consumer", **extra: Any) -> dict[str, Any]:
    """Settings for one client: bootstrap + the operator's ``kafka:`` pass-through + ``extra``."""
    conf = base_conf(settings.bootstrap, dict(settings.kafka))
    # A request to a frozen broker is otherwise awaited for librdkafka's 60 s: produce and
    # transaction requests (their timeout is this one) and fetches held the partitions whose
    # leader or transaction coordinator froze until the broker came back, long after Kafka had
    # moved them. Given up, the client drops the connection and asks again, of the new leader
    # or coordinator once Kafka has elected one (retries keep their sequence numbers: nothing
    # is written twice).
    conf.setdefault("socket.timeout.ms", int(settings.socket_timeout_s * 1000))
    if role == "producer":
        # A producer learns that Kafka moved a partition's leader when a request to the old
        # one fails or times out, or at its periodic metadata refresh (librdkafka's 5 min). A
        # partition that had no output while its input was held by a frozen or dead leader
        # (the producers of the input wait for the election too) sends its first batch after
        # it to the old leader, and waits out the socket timeout. Refreshed every few
        # seconds, it is sent to the new leader: a metadata request per producer, small.
        conf.setdefault("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS)
    if role != "consumer":
        conf = {k: v for k, v in conf.items() if not k.startswith(_CONSUMER_ONLY)}
    conf.update(extra)
    return conf


# Failover: a dead worker's partitions move after this session timeout (the smallest a broker
# allows by default, group.min.session.timeout.ms); librdkafka's 45 s would leave consumers
# without output that long.
SESSION_TIMEOUT_MS = 6000


# The data consumer's prefetch: a short pause when the local queue is full, and a bound on
# it per worker. librdkafka (2.x) pauses a partition's fetching for ``fetch.queue.backoff.ms``
# (1 s by default) once its queue passes the thresholds; a router catching up on a backlog
# drains its queue in a fraction of that and would sit idle for the rest (docs/decisions/011).
# The queue and one fetch (50 MiB by default) are what the prefetch holds, whatever the
# number of partitions (docs/decisions/021); librdkafka counts the records' payload against the
# queue's bound, and small records hold more than their payload in memory (docs/decisions/025).
PREFETCH = {"queued.max.messages.kbytes": 16 * 1024, "fetch.queue.backoff.ms": 20,
            "fetch.max.bytes": 8 * 1024 * 1024}


COOPERATIVE = "cooperative-sticky"


def assignment_strategy(settings: RouterSettings) -> str:
    """How the group assigns raw partitions. Where every route reads one raw topic,
    cooperative incremental assignment (KIP-429): a worker joining or leaving moves only the
    partitions that change owner, and the others keep flowing through the rebalance. Where a
    route reads one topic per version, partition p of each must stay with one worker, which
    only the range assignment guarantees (it is eager: every partition stops for a rebalance).
    The operator may ask for ``range`` (``kafka: {partition.assignment.strategy: range}``),
    e.g. to join a group of workers that still use it: a group cannot mix the two."""
    if any(len(rs.inputs) > 1 for rs in settings.routes):
        return "range"
    return "range" if settings.kafka.get("partition.assignment.strategy") == "range" \
        else COOPERATIVE


def data_consumer_conf(settings: RouterSettings, instance_id: str | None) -> dict[str, Any]:
    """The router's data consumer: the group, static membership when ``instance_id`` is
    given, a short session; the operator's ``kafka:`` settings win where given, except the
    assignment (:func:`assignment_strategy`) and manual commits."""
    extra: dict[str, Any] = {
        "group.id": settings.group_id, "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False, **PREFETCH,
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
    }
    if instance_id:
        extra["group.instance.id"] = instance_id
    conf = client_conf(settings, **extra)
    for k, v in extra.items():
        conf[k] = settings.kafka.get(k, v)
    conf["partition.assignment.strategy"] = assignment_strategy(settings)
    conf["enable.auto.commit"] = False
    return conf


def wait_for_broker(conf: dict[str, Any], stop: threading.Event | None = None,
                    max_delay: float = 30.0, give_up_after: float | None = None) -> None:
    """Block until the cluster answers a metadata request, retrying with backoff and logging
    one line per attempt (never a traceback). A refused login or certificate is named; with
    ``give_up_after`` (a command, not a worker) it ends the wait at once."""
    admin_conf = {k: v for k, v in conf.items() if not k.startswith(_CONSUMER_ONLY)}
    delay = 1.0
    started = time.monotonic()
    while True:
        errors = ClientErrors()
        admin = AdminClient({**admin_conf, "error_cb": errors, "logger": errors})
        try:
            list_topics(admin, errors, timeout=5.0)
            return
        except KafkaException as exc:
            reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        admin.poll(0)  # serves error_cb: the refused login or certificate, if that was it
        reason = errors.last_failure or reason
        refused = explain_connect_failure(admin_conf, errors, "")
        where = conf["bootstrap.servers"]
        if refused and give_up_after is not None:  # a command: a refusal will not pass by
            raise BrokerUnavailable(f"Kafka at {where} refused the connection: {refused}")
        if give_up_after is not None and time.monotonic() - started > give_up_after:
            raise BrokerUnavailable(
                f"no Kafka broker answered at {where} ({reason}); check "
                "the bootstrap address, that the broker runs, and the kafka: security settings")
        if refused:
            log.warning("Kafka at %s refused the connection: %s; retrying in %.0fs", where,
                        refused, delay)
        else:
            log.warning("cannot reach Kafka at %s (%s); retrying in %.0fs", where, reason,
                        delay)
        if stop is not None and stop.wait(delay):
            raise BrokerUnavailable("stopped while waiting for the broker")
        if stop is None:
            time.sleep(delay)
        delay = min(delay * 2, max_delay)


def partitions_of(conf: dict[str, Any], topic: str) -> int | None:
    admin_conf = {k: v for k, v in conf.items() if not k.startswith(_CONSUMER_ONLY)}
    # Ask for all topics: a metadata request naming the topic auto-creates it on brokers
    # with auto.create.topics.enable (the test broker does, with 4 partitions).
    errors = ClientErrors()
    admin = AdminClient({**admin_conf, "error_cb": errors})
    meta = list_topics(admin, errors, timeout=10.0)
    t = meta.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        refused = topic_denial(admin, admin_conf, topic, _ROLE_RIGHTS)
        if refused is not None:
            raise AccessDenied(refused)
        return None
    return len(t.partitions)


# Errors a partition's offsets query gives while leadership moves (a broker died or restarts):
# worth asking again, as the producer and consumer do on their own.
_TRANSIENT = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD, KafkaError._UNKNOWN_PARTITION,
    KafkaError._DESTROY_BROKER,  # a broker handle dropped when metadata lost the broker
    getattr(KafkaError, "FENCED_LEADER_EPOCH", -1), getattr(KafkaError, "UNKNOWN_LEADER_EPOCH", -1),
    getattr(KafkaError, "OFFSET_NOT_AVAILABLE", -1),
})


_T = TypeVar("_T")


def _ask_while_leaders_move(consumer: Consumer, ask: Callable[[], _T],
                            asked: Callable[[], list[TopicPartition]], timeout: float) -> _T:
    """``ask()`` (an offsets request about ``asked()``), asked again while leadership moves
    (``NOT_LEADER_FOR_PARTITION`` and the like, for a few seconds after a leader dies), up to
    ``timeout``; any other error, or one that lasts, is raised."""
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        try:
            return ask()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in _TRANSIENT or time.monotonic() + delay > deadline:
                raise
            tps = asked()
            log.info("offsets of %s: %s; asking again",
                     ", ".join(f"{tp.topic}:{tp.partition}" for tp in tps),
                     err.str() if isinstance(err, KafkaError) else exc)
            time.sleep(delay)
            # The client's cached leader may be the dead broker: a metadata request for the
            # topic refreshes it (a query alone does not: it answers "Unknown partition" until
            # the client's own refresh, docs/decisions/011).
            with contextlib.suppress(KafkaException):
                consumer.list_topics(tps[0].topic, timeout=5.0)
            delay = min(delay * 2, 2.0)


# One offsets request's time before it is asked again with fresh metadata (the router's
# ``request_timeout_s``): a request queued for a dead or frozen broker is given up after this,
# not after librdkafka's own timeout, so a leader's failure holds its partitions only while
# Kafka elects a new leader.
ATTEMPT_S = 2.0


def offsets_range(consumer: Consumer, tp: TopicPartition, timeout: float = 30.0,
                  attempt_s: float = ATTEMPT_S) -> tuple[int, int]:
    """(low, high) of ``tp`` asked of its leader (ListOffsets), asked again while leadership
    moves (:func:`_ask_while_leaders_move`)."""

    def ask() -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(tp, timeout=min(attempt_s, timeout),
                                                   cached=False)
        return int(low), int(high)

    return _ask_while_leaders_move(consumer, ask, lambda: [tp], timeout)


def end_offsets(consumer: Consumer, tps: list[TopicPartition], timeout: float = 30.0,
                attempt_s: float = ATTEMPT_S, which: int = OFFSET_END
                ) -> dict[tuple[str, int], int]:
    """The end of each of ``tps`` (the last stable offset under ``read_committed``), asked in
    one ListOffsets per leader rather than one round trip per partition: the router asks it of
    every output partition it writes, every batch (docs/decisions/011). ``which``:
    OFFSET_BEGINNING asks for each one's start instead. Partitions that failed are asked again
    while leadership moves (:func:`_ask_while_leaders_move`)."""
    ends: dict[tuple[str, int], int] = {}
    todo = list(tps)

    def ask() -> dict[tuple[str, int], int]:
        nonlocal todo
        # timestamps -1 and -2 are ListOffsets' LATEST and EARLIEST: what a watermark query
        # sends
        got = consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, which)
                                          for tp in todo], timeout=min(attempt_s, timeout))
        ends.update({(tp.topic, tp.partition): int(tp.offset) for tp in got if tp.error is None})
        todo = [tp for tp in got if tp.error is not None]
        if todo:
            err = todo[-1].error
            assert err is not None  # todo: the partitions with an error
            raise KafkaException(err)
        return ends

    return _ask_while_leaders_move(consumer, ask, lambda: todo, timeout)


def log_starts(conf: dict[str, Any], tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
    """The first offset of each of ``tps``, on a reader of its own (one ListOffsets per
    leader); those not answered are left out."""
    if not tps:
        return {}
    consumer = Consumer(reader_conf(conf))
    try:
        return end_offsets(consumer, tps, which=OFFSET_BEGINNING)
    except KafkaException as exc:
        log.info("start offsets not answered (%s)", exc)
        return {}
    finally:
        consumer.close()


def end_offsets_each(consumer: Consumer, tps: list[TopicPartition], attempt_s: float = ATTEMPT_S
                     ) -> tuple[dict[tuple[str, int], int], list[TopicPartition]]:
    """The ends of ``tps`` that their leaders give within ``attempt_s``, and the partitions
    whose leader did not answer. Asked together first (one ListOffsets per leader); if that
    fails, the client's metadata of the topics is refreshed (a leader that stopped answering
    may have been replaced already: its requests go to the new one), then each partition is
    asked on its own, in parallel, so that a dead or frozen leader holds back only its own
    partitions. The metadata of the topics left unanswered is refreshed again, so that the
    next ask goes to their new leaders once Kafka has elected them."""
    if not tps:
        return {}, []
    with contextlib.suppress(KafkaException):
        return end_offsets(consumer, tps, timeout=attempt_s, attempt_s=attempt_s), []
    _refresh_metadata(consumer, tps, attempt_s)

    def one(tp: TopicPartition) -> dict[tuple[str, int], int]:
        try:
            return end_offsets(consumer, [tp], timeout=attempt_s, attempt_s=attempt_s)
        except KafkaException:
            return {}

    ends: dict[tuple[str, int], int] = {}
    with ThreadPoolExecutor(min(len(tps), 8), thread_name_prefix="cutover-ends") as pool:
        for got in pool.map(one, tps):
            ends.update(got)
    unanswered = [tp for tp in tps if (tp.topic, tp.partition) not in ends]
    _refresh_metadata(consumer, unanswered, attempt_s)
    return ends, unanswered


def _refresh_metadata(consumer: Consumer, tps: list[TopicPartition], timeout: float) -> None:
    """Ask for the metadata of the topics of ``tps`` (their leaders), each at most
    ``timeout``; a topic not answered keeps what the client knew."""
    for topic in sorted({tp.topic for tp in tps}):
        with contextlib.suppress(KafkaException):
            consumer.list_topics(topic, timeout=timeout)


def reader_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A reader's settings. ``read_committed`` (librdkafka's default, said here on purpose):
    an aborted batch's output and checkpoint are never read back."""
    return {"isolation.level": "read_committed", **conf,
            "group.id": f"cutover-reader-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "enable.partition.eof": True,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20}


def read_to_end(conf: dict[str, Any], topic: str, partitions: dict[int, int] | None = None,
                timeout: float = 60.0, batch: int = 5000) -> Iterator[DataMessage]:
    """Yield every record of the given partitions (partition -> start offset; all partitions
    from the beginning when None) up to each partition's end at the time of reading.

    One consumer reads all partitions at once. A partition whose log is empty (ListOffsets
    earliest == latest, right on every broker) is not fetched; the others stop as soon as
    the position reaches the high watermark of a Fetch response (ListOffsets(LATEST) is
    wrong on the test broker), without waiting for an end-of-partition event. Short consume
    timeouts: ``consume(n, t)`` waits the whole ``t`` unless ``n`` records arrive.
    """
    if partitions is None:
        n = partitions_of(conf, topic)
        if n is None:
            return
        partitions = dict.fromkeys(range(n), OFFSET_BEGINNING)
    if not partitions:
        return
    consumer = Consumer(reader_conf(conf))
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        lows = end_offsets(consumer, tps, which=OFFSET_BEGINNING)
        highs = end_offsets(consumer, tps)
        # empty logs: nothing to read, whatever the start
        pos = {p: o for p, o in partitions.items() if lows[(topic, p)] != highs[(topic, p)]}
        if not pos:
            return
        consumer.assign([TopicPartition(topic, p, o) for p, o in pos.items()])
        pending = set(pos)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"could not read {topic} partitions {sorted(pending)} to their end within "
                    f"{timeout:.0f}s")
            for msg in consumer.consume(batch, 0.02):
                err = msg.error()
                if err is not None:
                    refused = denial(err, topic, conf, "Read")
                    if refused is not None:
                        raise AccessDenied(refused)
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    elif err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                        KafkaError._UNKNOWN_PARTITION):
                        raise BrokerUnavailable(f"reading {topic}: {err.str()}")
                    continue
                if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call
                    msg = cast(DataMessage, msg)
                pos[msg.partition()] = msg.offset() + 1
                yield msg
            for p in list(pending):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                           cached=True)
                at = pos[p] if pos[p] >= 0 else low
                if high >= 0 and at >= 0 and at >= high:
                    pending.discard(p)
    finally:
        consumer.close()
