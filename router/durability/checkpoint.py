"""Partition checkpoints: what a worker taking over a raw partition resumes from.

The test broker does not keep consumer-commit metadata, so checkpoints go to a compacted topic
of their own (the ``checkpoint_topic`` setting, default ``<group_id>.checkpoints``; key
``route/partition``). Without transactions a batch's checkpoint is durable *before* any output
of that batch is produced, so the newest checkpoint's state always covers every decision whose
output may exist, and its resume offsets do not pass any record whose output is not yet
delivered; with pinned boundaries, re-deciding records from the checkpoint's offsets with that
state gives the same decisions (see router.durability.resume). With transactions
(router.durability.transactions) it is written in the same transaction as the batch's output and
read with ``read_committed``: an aborted batch's checkpoint is never read, a committed one comes
with all its output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cutover.plan import utcnow
from router.base.errors import CheckpointWriteFailed
from router.base.kafka_io import read_to_end
from router.rule.decision import PartitionSnapshot


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    route: str
    partition: int
    seq: int = Field(ge=1, description="increases with every checkpoint of the partition, "
                                       "across owners")
    offsets: dict[str, int] = Field(description="input topic -> first offset not yet decided "
                                                "(never past a held record)")
    snapshot: PartitionSnapshot
    readback_from: int = Field(description="output offset from which records whose bg.src is "
                                           "at or after `offsets` may exist")
    rebuild_from: int = Field(description="output offset before which every record is older "
                                          "than the dedup retention window")
    worker: str
    owner_gen: int = Field(default=0, description="ownership generation: +1 at every takeover "
                                                  "of the partition. A checkpoint of an older "
                                                  "generation never wins, so a previous owner "
                                                  "that writes late cannot roll the state back")
    written_at: datetime = Field(default_factory=utcnow)


def checkpoint_topic(group_id: str) -> str:
    """The default checkpoint topic of a worker group (RouterSettings.checkpoint_topic)."""
    return f"{group_id}.checkpoints"


def checkpoint_key(route: str, partition: int) -> bytes:
    return f"{route}/{partition}".encode()


def _checkpoints_of(conf: dict[str, Any], topic: str, wanted: set[tuple[str, int]]
                    ) -> Iterator[tuple[tuple[str, int], Checkpoint]]:
    """Every committed checkpoint of the wanted (route, partition)s, in the topic's order."""
    keys = {checkpoint_key(r, p): (r, p) for r, p in wanted}
    for msg in read_to_end(conf, topic):
        rp = keys.get(msg.key() or b"")
        value = msg.value()
        if rp is None or value is None:
            continue
        with contextlib.suppress(ValidationError):
            yield rp, Checkpoint.model_validate_json(value)


def read_checkpoints(conf: dict[str, Any], topic: str,
                     wanted: set[tuple[str, int]]) -> dict[tuple[str, int], Checkpoint]:
    """The newest checkpoint of each wanted (route, partition): highest ownership generation,
    then highest seq, then last written."""
    out: dict[tuple[str, int], Checkpoint] = {}
    for rp, ck in _checkpoints_of(conf, topic, wanted):
        held = out.get(rp)
        if held is None or (ck.owner_gen, ck.seq) >= (held.owner_gen, held.seq):
            out[rp] = ck
    return out


def last_written(conf: dict[str, Any], topic: str,
                 wanted: set[tuple[str, int]]) -> dict[tuple[str, int], Checkpoint]:
    """The last committed checkpoint of each wanted (route, partition) in the topic's order,
    whoever wrote it: a worker that wrote the partition after another wrote it later in the
    log, whatever the ownership generations say."""
    return dict(_checkpoints_of(conf, topic, wanted))


def produce_checkpoint(producer: Producer, topic: str, ck: Checkpoint) -> None:
    """Queue one checkpoint (in a transaction: it is stored when the transaction commits)."""
    producer.produce(topic, key=checkpoint_key(ck.route, ck.partition),
                     value=ck.model_dump_json().encode())


def write_checkpoints(producer: Producer, topic: str, checkpoints: list[Checkpoint],
                      timeout: float = 30.0) -> None:
    """Produce and wait for every checkpoint; raise if one was not stored."""
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(str(err))

    for ck in checkpoints:
        producer.produce(topic, key=checkpoint_key(ck.route, ck.partition),
                         value=ck.model_dump_json().encode(), on_delivery=on_delivery)
    left = producer.flush(timeout)
    if errors or left:
        raise CheckpointWriteFailed(f"checkpoint write to {topic} failed: "
                                    f"{errors[0] if errors else f'{left} not delivered'}; the "
                                    "batch's output is not written")
