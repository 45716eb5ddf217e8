"""kill -9 of a tagged job in the middle of a micro-batch, then a restart on the same checkpoint.

The tagger's promise: at-least-once with byte-identical duplicates. The replayed batch has the
same offsets and the same watermark (both from the checkpoint), so every record it writes again
is the same key, value, headers and partition; nothing is lost.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict

import pytest
from spark_test_support import (
    TEST_JOBS,
    OutputWatcher,
    TagRun,
    assign_batches,
    check_heartbeats,
    committed_batches,
    kill_mid_batch,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, VERSION, parse_headers
from testground.brokers import create_topics
from tests.topics import RawRecord, read_topic

# Slow (make test-all), like the other shapes in test_kill_restart_shapes.py; the default suite
# keeps the kill and replay of a foreachBatch job (test_foreach_batch_writes.py).
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

PARTITIONS = 4


def test_kill_9_mid_batch_then_restart_gives_only_identical_duplicates(
    bootstrap: str, tmp_path: pytest.TempPathFactory
) -> None:
    tin, tout = f"kill-in-{uuid.uuid4().hex[:8]}", f"kill-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: PARTITIONS, tout: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=5, count=400, customers=10)))
    checkpoint = tmp_path / "ck"
    args = ["--bootstrap", bootstrap, "--input", tin, "--output", tout,
            "--checkpoint", str(checkpoint)]
    job = TEST_JOBS / "slow_enrich.py"

    first = TagRun(tag_command("blue", job, args), tmp_path / "first.log").start()
    killed_in = kill_mid_batch(first, OutputWatcher(bootstrap, tout, PARTITIONS), checkpoint,
                               timeout=300)
    before = read_topic(bootstrap, tout)

    second = run_tag(tag_command("blue", job, [*args, "--available-now"]),
                     tmp_path / "second.log", timeout=400)
    after = read_topic(bootstrap, tout)
    assert len(after) > len(before)

    orders = orders_by_position(read_topic(bootstrap, tin))
    logs = offset_logs(checkpoint, tin)
    batch_of = assign_batches(logs, orders)
    assert set(batch_of) == set(orders), "the restarted job did not read the whole input"
    watermark = {log.batch: log.meta.batchWatermarkMs or None for log in logs}
    position = {o.order_id: pos for pos, o in orders.items()}

    copies: dict[str, list[RawRecord]] = defaultdict(list)
    for rec in after:
        tagged = parse_headers(list(rec.headers))
        assert rec.header(VERSION) == "blue"
        if rec.header(KIND) == "heartbeat":
            continue
        value = json.loads(rec.value or b"")
        pos = position[value["order_id"]]
        order = orders[pos]
        assert tagged.event_time == order.ts  # the watermarked column
        assert tagged.batch == batch_of[pos]
        assert tagged.watermark == watermark[batch_of[pos]]
        copies[value["order_id"]].append(rec)

    expected = {o.order_id for o in orders.values() if o.amount >= 5}
    assert set(copies) == expected, "records lost or invented"
    duplicated = {oid: recs for oid, recs in copies.items() if len(recs) > 1}
    assert duplicated, "the kill did not interrupt a batch that had written records"
    for oid, recs in duplicated.items():
        assert len({r.content for r in recs}) == 1, f"{oid}: duplicates differ"
        assert len(recs) == 2
    assert {int(r.header("bg.batch") or -1) for rs in duplicated.values() for r in rs} == \
        {killed_in}
    # heartbeats: every committed batch on every partition; the replayed one identical if twice
    check_heartbeats(after, committed_batches(checkpoint), PARTITIONS)
    assert second.reports()[0].batch == killed_in  # the restart replays the killed batch first
