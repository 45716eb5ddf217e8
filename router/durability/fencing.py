"""Ending a previous owner's open transactions before a takeover reads anything back.

Under the worker's own transactional ids (router.durability.transactions) a partition's new owner
does not fence the previous one by starting a producer. What stops a previous owner instead:

* its offsets: a transaction sends its partitions' offsets with the group metadata of the
  consume that confirmed ownership, and the group coordinator refuses them once the group has
  a newer generation (KIP-447). A transaction that has not sent them can only abort;
* this module, for a transaction that sent them and was not committed yet (its worker froze or
  died in between): the output and checkpoint records it holds would be committed, or held
  back from every ``read_committed`` reader, after the new owner read the partition back. So
  the takeover waits until no transaction that is open on its partitions' outputs or on the
  checkpoint topic holds them back; one still open after :data:`FENCE_GRACE_S` (a healthy
  worker commits in milliseconds) is ended by fencing its writer: a producer started with the
  writer's transactional ids aborts its open transaction, and the writer's next call fails
  as fenced. The writers are read from the checkpoints: those pending on the checkpoint topic
  for the partitions taken over, and the writer of each one's newest committed checkpoint
  (a worker killed mid-batch has queued none yet). When the group says that none of them is
  a member any more (killed, or frozen past its session: :func:`may_be_members`), there is no
  commit to wait for, and they are fenced at once.

A writer that is neither (a partition's first owner, killed in its first batch) is ended by
the broker after ``transaction.timeout.ms`` (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pydantic import ValidationError

from router.base.kafka_io import end_offsets, partitions_of, read_to_end, reader_conf
from router.durability.checkpoint import Checkpoint, checkpoint_key, read_checkpoints
from router.durability.transactions import INIT_TIMEOUT_S, PartitionKey, slot_ids

log = logging.getLogger("cutover.router")

# How long open transactions on the partitions taken over are given to end by themselves
# before their writers are fenced.
FENCE_GRACE_S = 3.0
# How long, after that, a takeover waits for them to end before it reads what is stable.
SETTLE_S = 15.0
FENCE_THREADS = 8
# How long the group's coordinator is given to say who its members are.
MEMBERS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Unstable:
    """A partition an open transaction holds back: its last stable offset and its end."""

    tp: TopicPartition
    stable: int
    end: int


def open_transactions(conf: dict[str, Any], tps: list[TopicPartition],
                      timeout_s: float) -> list[Unstable]:
    """The partitions of ``tps`` whose last stable offset stays below their end as it was at
    the call (an open transaction holds them back) after ``timeout_s``. One ListOffsets per
    leader for each ask (kafka_io.end_offsets), not one per partition."""
    everything = Consumer({**reader_conf(conf), "isolation.level": "read_uncommitted"})
    committed = Consumer(reader_conf(conf))
    try:
        ends = end_offsets(everything, tps)
        deadline = time.monotonic() + timeout_s
        while True:
            stable = end_offsets(committed, tps)
            held = [Unstable(tp, stable[key], ends[key]) for tp in tps
                    if stable[key := (tp.topic, tp.partition)] < ends[key]]
            if not held or time.monotonic() > deadline:
                return held
            time.sleep(0.05)
    finally:
        everything.close()
        committed.close()


def pending_writers(conf: dict[str, Any], ckpt_topic: str, held: list[Unstable],
                    keys: set[PartitionKey]) -> set[str]:
    """The workers with a checkpoint of one of ``keys`` past the last stable offset of the
    checkpoint topic (in an open transaction, or committed after one)."""
    wanted = {checkpoint_key(r, p) for r, p in keys}
    starts = {u.tp.partition: u.stable for u in held if u.tp.topic == ckpt_topic}
    if not starts:
        return set()
    writers: set[str] = set()
    for msg in read_to_end({**conf, "isolation.level": "read_uncommitted"}, ckpt_topic, starts,
                           timeout=SETTLE_S):
        value = msg.value()
        if msg.key() not in wanted or value is None:
            continue
        with contextlib.suppress(ValidationError):
            writers.add(Checkpoint.model_validate_json(value).worker)
    return writers


def fence(conf: dict[str, Any], transactional_ids: list[str]) -> None:
    """Start a producer with each id: the transaction coordinator aborts the id's open
    transaction and fences its producer."""
    def one(tid: str) -> None:
        producer = Producer({**conf, "transactional.id": tid})
        try:
            producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("fencing %s: %s", tid, exc)
        finally:
            producer.flush(0)

    with ThreadPoolExecutor(min(len(transactional_ids), FENCE_THREADS) or 1,
                            thread_name_prefix="txn-fence") as pool:
        list(pool.map(one, transactional_ids))


def may_be_members(conf: dict[str, Any], group_id: str, writers: set[str]) -> bool:
    """Whether one of ``writers`` (worker ids) may still be a member of the group, as its
    coordinator answers now: False only when every member is static (its instance id is its
    worker id: router.worker.datapath) and none is one of them. A writer that left the group
    (killed, or frozen past its session) commits nothing in the grace; one that is a member may be
    committing its last batch, and fencing it would cost it a rejoin. Unknown (no answer, or a
    member without an instance id, whose worker id the group does not show): True."""
    admin = AdminClient(conf)
    try:
        group = admin.describe_consumer_groups(
            [group_id], request_timeout=MEMBERS_TIMEOUT_S)[group_id].result(MEMBERS_TIMEOUT_S)
    except KafkaException as exc:
        log.info("the group's members were not answered (%s); waiting for the writers %s",
                 exc, sorted(writers))
        return True
    ids = [m.group_instance_id for m in group.members]
    return any(i is None or i in writers for i in ids)


def end_open_transactions(conf: dict[str, Any], group_id: str, me: str, ckpt_topic: str,
                          outputs: dict[str, set[int]], keys: set[PartitionKey],
                          grace_s: float = FENCE_GRACE_S, settle_s: float = SETTLE_S) -> bool:
    """Wait until no open transaction holds back the checkpoint topic or the output
    partitions (``outputs``: topic -> partitions) of ``keys``; fence the writers of those still
    open after ``grace_s`` (the module's docstring says which). False if one is still open
    after ``settle_s`` more (the takeover then reads what is stable: an older checkpoint, more
    replayed, nothing lost)."""
    n = partitions_of(conf, ckpt_topic) or 0
    tps = [TopicPartition(ckpt_topic, p) for p in range(n)] + \
        [TopicPartition(t, p) for t, ps in sorted(outputs.items()) for p in sorted(ps)]
    held = open_transactions(conf, tps, 0.0)
    if not held:
        return True
    writers = pending_writers(conf, ckpt_topic, held, keys)
    writers |= {ck.worker for ck in read_checkpoints(conf, ckpt_topic, keys).values()}
    writers.discard(me)
    waited = 0.0
    if not writers or may_be_members(conf, group_id, writers):
        waited = grace_s
        held = open_transactions(conf, [u.tp for u in held], grace_s)
        if not held:
            return True
    ids = [tid for w in sorted(writers) for tid in slot_ids(group_id, w)]
    log.warning("open transactions hold back %s after %.1fs; fencing the writers %s%s",
                [f"{u.tp.topic}:{u.tp.partition}" for u in held], waited, sorted(writers),
                "" if waited else " (no longer members of the group)")
    if ids:
        fence(conf, ids)
    return not open_transactions(conf, [u.tp for u in held], settle_s)
