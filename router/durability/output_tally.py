"""Records forwarded per version, counted on a route's output topic from a point on.

The router's counters say how many records it forwarded, not whose; every output record
carries the ``bg.version`` it came from, so a reader of the output topic's new records tells
(``cutover rollout``'s live view). A plain consumer with no group: nothing is committed.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from cutover.headers import VERSION
from router.base.kafka_io import partitions_of, reader_conf


class OutputTally:
    """Counts, per version, the records that reach ``topic`` after it was opened."""

    def __init__(self, conf: dict[str, Any], topic: str) -> None:
        self.counts: Counter[str] = Counter()
        self.consumer = Consumer(reader_conf(conf))
        n = partitions_of(conf, topic) or 0
        assign = []
        for p in range(n):
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=10, cached=False)
            assign.append(TopicPartition(topic, p, max(low, high)))
        self.consumer.assign(assign)

    def poll(self, budget_s: float = 0.2) -> dict[str, int]:
        """Count what arrived (reading for at most ``budget_s``); the totals so far."""
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            msgs = self.consumer.consume(5000, 0.05)
            if not msgs:
                break
            for msg in msgs:
                if msg.error() is not None:
                    continue
                for name, raw in msg.headers() or ():
                    if name == VERSION and raw is not None:
                        self.counts[raw.decode("utf-8", errors="replace")] += 1
                        break
        return dict(self.counts)

    def close(self) -> None:
        self.consumer.close()
