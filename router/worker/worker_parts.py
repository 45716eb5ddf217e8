"""What the data path runs with once connected, built whole in one place
(router.worker.datapath.DataPath._connect) before the first batch.

Why one frozen object: the parts need the broker (the routes' partitions and record sizes size
the producers and the transactions), so they cannot be made with the worker itself; and none of
them is replaced while the worker runs (a rebuild resets the writer, the batch's end and the
assignment, whose partitions' producers it drops, and replaces only the data consumer:
router.worker.data_consumer). So the data path holds them together, every part present, and no
part is set or checked one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Producer

from router.durability.batch_end import BatchEnd
from router.durability.output_writer import OutputWriter
from router.durability.transactions import WorkerTransactions
from router.worker.assignment import Assignment
from router.worker.control import ControlReader


@dataclass(frozen=True)
class WorkerParts:
    """``producer``: the plain producer (output without transactions, statuses); ``writer``: the
    batch's output (router.durability.output_writer); ``txn``: the partitions' transactional
    producers, None with transactions off (router.durability.transactions.transactions_on);
    ``control``: the plan reader (router.worker.control); ``assignment``: the partitions owned
    (router.worker.assignment); ``end``: the end of each batch (router.durability.batch_end)."""

    producer: Producer
    writer: OutputWriter
    txn: WorkerTransactions | None
    control: ControlReader
    assignment: Assignment
    end: BatchEnd
