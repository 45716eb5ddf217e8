"""Router settings: the YAML file ``cutover router --config FILE`` reads."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cutover.validation import RouteName, describe

BOOTSTRAP_ENV = "CUTOVER_BOOTSTRAP"
MIB = 1 << 20
FUTURE_TOLERANCE_MS = 600_000  # default, or half the retention when that is shorter

TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
JsonPath = Annotated[str, Field(pattern=r"^\$?\.?[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")]


class SettingsError(ValueError):
    """A settings file that cannot be used; the message names the file and the key."""


class Handover(StrEnum):
    ORDERED = "ordered"
    IMMEDIATE = "immediate"


class Transactions(StrEnum):
    """Whether each batch's output, dead letters, shadow copies and checkpoint are written in one
    Kafka transaction (router.durability.transactions). ``auto``: on where the broker answers that
    it serves every transaction API, the markers that hide aborted records from ``read_committed``
    consumers included (Apache Kafka); off where it does not (Tansu)
    (cutover.broker_capabilities)."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class DedupSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    identity: Literal["record", "key_event_time"] | tuple[JsonPath, ...] = "record"
    retention_ms: int = Field(default=3_600_000, gt=0)
    # Memory of one partition's dedup store at most; what a worker's stores hold together is
    # set by RouterSettings.store_memory (router.dedup.memory).
    filter_bytes: int = Field(
        default=16 * MIB, ge=32,
        description="the most front Bloom filter one partition's store holds, all its time "
                    "buckets together (each bucket is sized for the identities the partition "
                    "sees, from the worker's store_memory.filter_bytes); a fuller filter sends "
                    "more new identities to a RocksDB read, never loses one")
    write_buffer_bytes: int = Field(
        default=8 * MIB, ge=MIB,
        description="the largest RocksDB memtable of one partition's store (two at most); "
                    "all the worker's memtables together are bounded by "
                    "store_memory.write_buffer_bytes")

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, v: object) -> object:
        if isinstance(v, dict) and "block_cache_bytes" in v:
            raise ValueError("dedup.block_cache_bytes is gone: a worker's stores share one "
                             "block cache; set store_memory.block_cache_bytes at the top of "
                             "the settings file instead")
        return v

    @field_validator("identity", mode="before")
    @classmethod
    def _list_to_tuple(cls, v: object) -> object:
        if isinstance(v, list):
            if not v:
                raise ValueError("a list of JSON field paths must not be empty")
            return tuple(v)
        return v


class StoreMemorySettings(BaseModel):
    """Memory of all the dedup stores of one worker together (router.dedup.memory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_cache_bytes: int = Field(
        default=64 * MIB, ge=MIB,
        description="one RocksDB block cache shared by every dedup store of the worker")
    write_buffer_bytes: int = Field(
        default=64 * MIB, ge=MIB,
        description="RocksDB memtables of every dedup store of the worker together; past "
                    "three quarters of it the worker flushes the largest, quiet stores' "
                    "included, and writes never wait for it")
    filter_bytes: int = Field(
        default=128 * MIB, ge=MIB,
        description="front Bloom filters of every dedup store of the worker together; each "
                    "filter bucket is sized for the identities its partition sees (about 2 "
                    "bytes per identity in retention, 4 to 8 for a partition at its "
                    "dedup.filter_bytes); once spent, new buckets get a small filter and "
                    "more lookups read RocksDB")


class RouteSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: RouteName
    inputs: tuple[TopicName, ...] = Field(min_length=1)
    output: TopicName
    dead_letter: TopicName | None = None
    shadow: TopicName | None = Field(default=None, description="copy suppressed records here")
    dedup: DedupSettings = DedupSettings()
    handover: Handover = Handover.ORDERED
    max_held: int = Field(default=10_000, gt=0,
                          description="records held in memory per partition in ordered "
                                      "handover; over it the partition pauses (reported) and "
                                      "reads the rest again from the raw topic once released")
    future_tolerance_ms: int | None = Field(
        default=None, gt=0,
        description="a data record whose event time is further than this ahead of the time "
                    "it was written to the raw topic goes to the dead-letter topic (a poison "
                    "timestamp); default 10 minutes, or half of dedup.retention_ms if shorter")

    @model_validator(mode="after")
    def _defaults(self) -> RouteSettings:
        if self.dead_letter is None:
            object.__setattr__(self, "dead_letter", f"{self.output}.dlq")
        retention = self.dedup.retention_ms
        if self.future_tolerance_ms is None:
            object.__setattr__(self, "future_tolerance_ms",
                               min(FUTURE_TOLERANCE_MS, max(1, retention // 2)))
        elif self.future_tolerance_ms >= retention:
            raise ValueError(
                f"future_tolerance_ms ({self.future_tolerance_ms}) must be below "
                f"dedup.retention_ms ({retention}): a record that far ahead moves the "
                "partition's horizon, and records older than horizon - retention go to the "
                "dead-letter topic; lower future_tolerance_ms or raise retention_ms")
        clash = {self.output, self.dead_letter, self.shadow} & set(self.inputs)
        if clash:
            raise ValueError(f"topic {sorted(t for t in clash if t)[0]!r} is both an input and "
                             "an output of the route")
        return self


class RouterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap: str = Field(min_length=1)
    control_topic: TopicName = "bg.control"
    status_topic: TopicName = "bg.status"
    group_id: str = "cutover-router"
    checkpoint_topic: TopicName | None = Field(
        default=None,
        description="compacted topic of partition checkpoints; default <group_id>.checkpoints. "
                    "Set it where topic names are governed (ACLs, prefixes); workers of one "
                    "group must agree on it")
    state_dir: Path = Path("var/cutover-router")
    store_memory: StoreMemorySettings = StoreMemorySettings()
    http_port: int | None = Field(default=6066, ge=0, le=65535)
    status_interval_s: float = Field(default=5.0, gt=0)
    batch_records: int = Field(
        default=80_000, ge=1, le=1_000_000,
        description="records a worker consumes and decides at most per batch; a batch is one "
                    "transaction per partition, so larger batches pass a backlog faster, and "
                    "each record of a full batch waits longer for its commit")
    stall_after_s: float = Field(
        default=30.0, gt=0,
        description="seconds a worker may own partitions with input waiting and decide no "
                    "record before its watchdog reports it stalled (status, log, metric "
                    "cutover_worker_stalled, /health 503) and rebuilds its clients; a step "
                    "blocked for three times as long exits the process non-zero, so that its "
                    "supervisor restarts it")
    request_timeout_s: float = Field(
        default=2.0, gt=0, le=60,
        description="seconds one offsets request (a partition's end, its low offset) may take "
                    "before it is asked again with fresh metadata; a request to a dead or "
                    "frozen broker is given up after this and asked of the partition's new "
                    "leader")
    socket_timeout_s: float = Field(
        default=5.0, ge=2, le=300,
        description="seconds a request to one broker (produce, transaction, fetch, commit) may "
                    "go unanswered before the client drops the connection and asks again, of the "
                    "partition's new leader or the new transaction coordinator once Kafka has "
                    "moved them: a frozen broker holds its partitions this long, not until it "
                    "answers. A request asked again before Kafka moved them (the brokers' "
                    "broker.session.timeout.ms, 9 s by default) waits again, so about half of "
                    "that (librdkafka's socket.timeout.ms; the kafka: setting of that name "
                    "wins)")
    commit_stuck_s: float = Field(
        default=10.0, gt=0, le=300,
        description="seconds a transaction's commit may stay in flight before it is given up "
                    "as stuck (its producer still waiting on a broker that froze or died): the "
                    "producer is replaced by one with the same transactional id, whose start "
                    "aborts the stuck transaction and fences the old producer, and its "
                    "partitions are replayed from their checkpoints. Longer than the brokers' "
                    "broker.session.timeout.ms (9 s by default), after which Kafka has moved "
                    "the leaders and the transaction coordinator the commit waits on; with "
                    "transactions only")
    max_rebuilds: int = Field(
        default=5, ge=1,
        description="client rebuilds in a row with no record decided between them before the "
                    "worker exits non-zero with the last reason, for its supervisor to restart "
                    "it")
    kafka: dict[str, str | int | bool] = Field(
        default_factory=dict,
        description="librdkafka client settings passed through (security.protocol, sasl.*, "
                    "ssl.*)")
    transactions: Transactions = Field(
        default=Transactions.AUTO,
        description="auto | on | off: write each batch in one Kafka transaction (exactly-once "
                    "output, dead letters and shadow copies for read_committed consumers); "
                    "auto asks the broker: on where it serves every transaction API "
                    "(Apache Kafka), off where it does not (Tansu)")
    routes: tuple[RouteSettings, ...] = Field(min_length=1)

    @field_validator("kafka")
    @classmethod
    def _login_supported(cls, kafka: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        from cutover.kafka_errors import unsupported_login  # the clients' logins, stated once

        problem = unsupported_login(kafka)
        if problem is not None:
            raise ValueError(problem)
        return kafka

    @model_validator(mode="after")
    def _unique(self) -> RouterSettings:
        if self.checkpoint_topic is None:
            object.__setattr__(self, "checkpoint_topic", f"{self.group_id}.checkpoints")
        names = [r.name for r in self.routes]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"route name {sorted(dupes)[0]!r} is used twice")
        seen: dict[str, str] = {}
        for r in self.routes:
            for t in r.inputs:
                if t in seen:
                    raise ValueError(f"input topic {t!r} belongs to routes {seen[t]!r} and "
                                     f"{r.name!r}; a raw topic feeds one route")
                seen[t] = r.name
        used = {self.control_topic, self.status_topic}
        for r in self.routes:
            used |= {*r.inputs, r.output, r.dead_letter or "", r.shadow or ""}
        if self.checkpoint_topic in used:
            raise ValueError(f"checkpoint_topic {self.checkpoint_topic!r} is also used for "
                             "another purpose; give the checkpoints a topic of their own")
        return self

    def route(self, name: str) -> RouteSettings:
        for r in self.routes:
            if r.name == name:
                return r
        raise KeyError(name)


def parse_settings(data: object, source: str = "<settings>") -> RouterSettings:
    if not isinstance(data, dict):
        raise SettingsError(f"{source}: expected a mapping of settings at the top level")
    env = os.environ.get(BOOTSTRAP_ENV)
    if env:
        data = {**data, "bootstrap": env}
    try:
        return RouterSettings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError("\n".join(f"{source}: {line}" for line in describe(exc))) from None


def load_settings(path: str | Path) -> RouterSettings:
    """Read and validate a settings file; ``CUTOVER_BOOTSTRAP`` overrides ``bootstrap``."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SettingsError(f"{p}: cannot read settings file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{p}: not valid YAML ({exc})") from None
    return parse_settings(data, str(p))
