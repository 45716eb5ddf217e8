"""Which producer a partition writes through (router.durability.transactions): the slot of its
output partition's leader, bound for a batch, and held back only while that slot commits.

The producers are stand-ins: what is under test is the binding, not the client."""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer

from cutover.settings import RouterSettings
from router.durability.transactions import (
    MAX_SLOTS,
    Slot,
    WorkerTransactions,
    slot_ids,
    slot_of_broker,
)


class StandInProducer:
    def __init__(self) -> None:
        self.begun = 0

    def begin_transaction(self) -> None:
        self.begun += 1

    def purge(self, in_queue: bool, in_flight: bool, blocking: bool) -> None:
        pass


def worker(leaders: dict[int, int]) -> WorkerTransactions:
    """A worker of route ``r`` (output ``r.out``) whose output partitions have ``leaders``
    (partition -> broker), with a started slot per broker."""
    settings = RouterSettings.model_validate({
        "bootstrap": "k:9092", "group_id": "g",
        "routes": [{"name": "r", "inputs": ["r.raw"], "output": "r.out"}]})
    txn = WorkerTransactions(settings, {}, "w1")
    txn.leaders = {("r.out", p): b for p, b in leaders.items()}
    for b in set(leaders.values()):
        i = slot_of_broker(b)
        txn.slots.setdefault(i, Slot(i, cast(Producer, cast(Any, StandInProducer()))))
    return txn


def test_a_partition_writes_through_the_slot_of_its_output_leader() -> None:
    txn = worker({0: 1, 1: 2, 2: 1, 3: 3})
    assert txn.plan([("r", p) for p in range(4)]) == set()
    assert [txn.slot_for(("r", p)) for p in range(4)] == [1, 2, 1, 3]
    txn.begin([("r", 0), ("r", 2)])
    assert txn.bound[("r", 0)] is txn.bound[("r", 2)], "one transaction for one broker's"
    producer = cast(Any, txn.slots[1].producer)
    assert producer.begun == 1


def test_brokers_beyond_the_slots_share_them() -> None:
    assert slot_of_broker(MAX_SLOTS + 2) == slot_of_broker(2)
    assert slot_of_broker(-1) == 0, "a partition without a known leader"
    assert len(slot_ids("g", "w1")) == MAX_SLOTS
    assert all(t.startswith("g.w1.") for t in slot_ids("g", "w1")), \
        "under the group's prefix (docs/security.md's access rule)"


def test_only_the_partitions_of_a_committing_slot_are_held_back() -> None:
    txn = worker({0: 1, 1: 2, 2: 1, 3: 2})
    keys = [("r", p) for p in range(4)]
    txn.plan(keys)
    txn.begin([("r", 0)])
    txn.slots[1].committing = True
    assert txn.plan(keys) == {("r", 0), ("r", 2)}
    txn.slots[1].committing = False
    assert txn.plan(keys) == set()


def test_a_bound_partition_keeps_its_slot_until_its_batch_is_settled() -> None:
    txn = worker({0: 1, 1: 2})
    txn.plan([("r", 0), ("r", 1)])
    txn.begin([("r", 0)])
    txn.leaders[("r.out", 0)] = 2   # the leader moved during the batch
    txn.plan([("r", 0), ("r", 1)])
    assert txn.slot_for(("r", 0)) == 1
    txn.release([("r", 0)])
    txn.plan([("r", 0), ("r", 1)])
    assert txn.slot_for(("r", 0)) == 2


def test_a_leader_move_during_a_batch_does_not_move_a_planned_partition() -> None:
    txn = worker({0: 1, 1: 2})
    txn.plan([("r", 0), ("r", 1)])
    txn.leaders[("r.out", 1)] = 1   # refreshed in the background, after the batch's plan
    txn.begin([("r", 1)])
    assert txn.bound[("r", 1)].index == 2


def test_a_slot_given_up_is_started_again_though_no_partition_maps_to_it_now() -> None:
    """Its transaction may still be open: only a start with its id aborts it."""
    txn = worker({0: 1, 1: 2})
    txn.plan([("r", 0), ("r", 1)])
    txn.begin([("r", 0)])
    txn.replace(("r", 0))
    assert 1 not in txn.slots
    assert txn.to_restart == {1}
    txn.leaders[("r.out", 0)] = 2   # its leader moved meanwhile
    txn.reset()
    assert txn.to_restart == {1, 2}


class AbortingProducer(StandInProducer):
    """A producer whose ``abort_transaction`` answers each of ``errors`` in turn, then
    succeeds."""

    def __init__(self, errors: list[KafkaError]) -> None:
        super().__init__()
        self.errors = errors
        self.aborts = 0

    def abort_transaction(self, timeout: float) -> None:
        self.aborts += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))


def aborted(errors: list[KafkaError]) -> tuple[set[tuple[str, int]], int]:
    """Abort a begun transaction of partition r/0 whose producer answers ``errors`` first:
    the keys given up as fenced, and how many times the abort was asked."""
    txn = worker({0: 1})
    producer = AbortingProducer(errors)
    txn.slots[1] = Slot(1, cast(Producer, cast(Any, producer)))
    txn.begin([("r", 0)])
    return txn.abort([("r", 0)]), producer.aborts


def test_an_abort_that_times_out_is_asked_again_and_keeps_the_partition() -> None:
    timed_out = KafkaError(KafkaError._TIMED_OUT, "abort timed out", retriable=True)
    assert aborted([timed_out, timed_out]) == (set(), 3)


def test_an_abort_without_an_open_transaction_is_no_failure() -> None:
    assert aborted([KafkaError(KafkaError._STATE, "no transaction")]) == (set(), 1)


def test_a_fenced_abort_gives_the_partition_up() -> None:
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    assert aborted([fenced]) == ({("r", 0)}, 1)


def test_an_abort_failing_otherwise_gives_the_partition_up() -> None:
    refused = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized")
    assert aborted([refused]) == ({("r", 0)}, 1)
