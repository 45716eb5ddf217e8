"""Options of the Python Kafka source and sink, parsed from Spark's option map.

The names are those of Spark's own Kafka connector (``kafka.bootstrap.servers``, ``subscribe``,
``startingOffsets``, ``maxOffsetsPerTrigger``, ``topic``, ``kafka.*``), so a job written for the
JVM connector runs unchanged on this one. Everything is validated when the query starts, on the
driver, so a typo fails there with a message instead of inside an executor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cutover.headers import VERSION_PATTERN
from spark_tagger.client_security import KafkaOptionError, librdkafka_security

KAFKA_PREFIX = "kafka."

# Java-client settings that have no librdkafka equivalent; Spark's connector sets or rejects them
# itself, so a job written for it may carry them. They are ignored here.
_JAVA_ONLY = {
    "key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
    "interceptor.classes", "partitioner.class",
}


# Options of Spark's connector that this one does not implement: refused by name rather than
# silently ignored, since each changes what is read.
UNSUPPORTED = ("startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
               "endingOffsetsByTimestamp", "minOffsetsPerTrigger", "maxTriggerDelay",
               "startingOffsetsByTimestampStrategy")


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options with the prefix removed: the client's own configuration."""
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith(KAFKA_PREFIX):
            name = key[len(KAFKA_PREFIX):]
            # Spark lower-cases option keys; librdkafka property names are lower case too.
            if name.lower() not in _JAVA_ONLY:
                out[name] = str(value)
    if "bootstrap.servers" not in out:
        raise KafkaOptionError(
            "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])"
        )
    return librdkafka_security(out)


def _get(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name.lower():
            return str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaOptionError(f"option {name!r} must be true or false, not {raw!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise KafkaOptionError(f"option {name!r} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise KafkaOptionError(f"option {name!r} must be a positive integer, not {raw!r}")
    return value


OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[str, int]]


def parse_offset_spec(name: str, raw: str | None, default: str) -> OffsetSpec:
    """``earliest``, ``latest`` or Spark's JSON ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest,
    -1 latest)."""
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    ok = isinstance(parsed, dict) and all(
        isinstance(t, str) and isinstance(parts, dict)
        and all(re.fullmatch(r"\d+", str(p)) and isinstance(o, int) for p, o in parts.items())
        for t, parts in parsed.items()
    )
    if not ok:
        raise KafkaOptionError(
            f"option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}} (-2 earliest, -1 latest), not {text[:80]!r}'
        )
    return {t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


class SourceOptions(BaseModel):
    """What the stream (or batch) reader needs; built once on the driver, pickled to executors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: Any = "latest"
    ending_offsets: Any = "latest"
    max_offsets_per_trigger: int | None = Field(default=None, gt=0)
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = Field(default=120_000, gt=0)

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        for name in UNSUPPORTED:
            if _get(options, name) is not None:
                raise KafkaOptionError(
                    f"option {name!r} of Spark's Kafka connector is not supported by "
                    "cutover_kafka; use startingOffsets (earliest, latest or JSON offsets)"
                )
        subscribe = _get(options, "subscribe")
        pattern = _get(options, "subscribePattern")
        assign_raw = _get(options, "assign")
        given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern),
                                ("assign", assign_raw)) if v]
        if len(given) != 1:
            raise KafkaOptionError(
                "exactly one of the options 'subscribe', 'subscribePattern', 'assign' is needed"
                + (f" (got {', '.join(given)})" if given else "")
            )
        assign = None
        if assign_raw:
            try:
                parsed = json.loads(assign_raw)
                assign = {str(t): tuple(int(p) for p in ps) for t, ps in parsed.items()}
            except (ValueError, TypeError, AttributeError):
                raise KafkaOptionError(
                    f'option \'assign\' must be JSON like {{"topic": [0, 1]}}, not {assign_raw!r}'
                ) from None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaOptionError(f"option 'subscribePattern' is not a regex: {exc}") from None
        topics = tuple(t.strip() for t in (subscribe or "").split(",") if t.strip())
        if subscribe is not None and not topics:
            raise KafkaOptionError("option 'subscribe' names no topic")
        return cls(
            client=kafka_params(options),
            subscribe=topics,
            subscribe_pattern=pattern or None,
            assign=assign,
            starting_offsets=parse_offset_spec(
                "startingOffsets", _get(options, "startingOffsets"),
                "latest" if streaming else "earliest",
            ),
            ending_offsets=parse_offset_spec(
                "endingOffsets", _get(options, "endingOffsets"), "latest"
            ),
            max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            poll_timeout_ms=_positive_int(options, "kafkaConsumer.pollTimeoutMs") or 120_000,
        )


class Tagging(BaseModel):
    """The ``bg.*`` stamp of one micro-batch (no batch for a plain batch write); absent on an
    untagged write."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(pattern=VERSION_PATTERN)
    batch: int | None = Field(default=None, ge=0)
    watermark: int | None = None
    event_time_column: str


class SinkOptions(BaseModel):
    """What the writer needs: where records go and, for the tagger, how to stamp them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client: dict[str, str]
    topic: str | None = None
    tagging: Tagging | None = None
    flush_timeout_s: float = Field(default=120.0, gt=0)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SinkOptions:
        topic = _get(options, "topic")
        return cls(client=kafka_params(options), topic=topic.strip() if topic else None)


def producer_config(client: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka producer settings: the user's, over defaults that keep order and lose nothing."""
    config: dict[str, Any] = {
        "enable.idempotence": True,   # retries neither reorder nor duplicate within a session
        "acks": "all",
        "linger.ms": 5,
        "log_level": 3,
    }
    config.update(client)
    return config


def consumer_config(client: Mapping[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    """librdkafka consumer settings for reading explicit offset ranges (no commits; the group id
    is only there because librdkafka requires one, and needs no ACL: see GROUP_ONLY_ERRORS)."""
    config: dict[str, Any] = {
        "group.id": "cutover-kafka-source",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
        "fetch.wait.max.ms": 50,
        "log_level": 3,
    }
    config.update({k: v for k, v in client.items() if k != "group.id"} | (
        {"group.id": client["group.id"]} if "group.id" in client else {}))
    return config
