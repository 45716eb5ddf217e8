"""Two queries of one job on one raw topic, each with its own watermark.

Each query's records carry that query's batch and watermark (recomputed from its checkpoint).
Heartbeats carry the lowest watermark of the two, since the router takes a version's watermark
from the highest heartbeat it has seen: on every partition, no record of the version comes
after a heartbeat whose watermark has passed the record's event time, which is what lets the
router hold, release and declare readiness correctly. With each query's own watermark in its
heartbeats, the windows of the slower query would come after the faster query's heartbeats had
passed them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from spark_test_support import (
    TEST_JOBS,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, parse_headers
from testground.brokers import create_topics
from tests.topics import read_topic

# about 100 s on two busy cores: make test-all runs it
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

PARTITIONS = 3


def test_queries_sharing_a_topic_keep_their_watermarks_and_heartbeats_promise_the_lowest(
    bootstrap: str, tmp_path: Path
) -> None:
    n = uuid.uuid4().hex[:8]
    tin, out = f"shared-in-{n}", f"shared-out-{n}"
    create_topics(bootstrap, {tin: 2, out: PARTITIONS})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=61, count=300, customers=4,
                                                       max_disorder_ms=2_000,
                                                       closing_gap_ms=60_000)))
    ck = tmp_path / "ck"
    run_tag(tag_command("blue", TEST_JOBS / "shared_topic.py", [bootstrap, tin, out, str(ck)]),
            tmp_path / "job.log", timeout=600)
    orders = orders_by_position(read_topic(bootstrap, tin))
    wms = {q: expected_watermarks(offset_logs(ck / q, tin), orders, d)
           for q, d in (("orders", 5_000), ("totals", 20_000))}
    records = read_topic(bootstrap, out)
    ids = {o.order_id for o in orders.values()}
    copies = 0
    for p in range(PARTITIONS):
        promised = None  # the highest heartbeat watermark so far: what the router believes
        for r in (r for r in records if r.partition == p):
            tagged = parse_headers(list(r.headers))
            if r.header(KIND):
                if tagged.watermark is not None:
                    promised = max(promised or 0, tagged.watermark)
                continue
            value = json.loads(r.value or b"")
            query = "orders" if "order_id" in value else "totals"
            assert tagged.watermark == wms[query][tagged.batch or 0]  # its own query's
            assert promised is None or tagged.event_time > promised, (
                f"p{p}: a {query} record at {tagged.event_time} after a heartbeat promised "
                f"{promised}")
            copies += query == "orders"
    assert copies == len(ids)
    assert any(r.header(KIND) and r.header("bg.watermark") for r in records)
