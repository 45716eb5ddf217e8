"""Deterministic order events: the input of the demo and of the example jobs.

The demo, the Spark tests and the conformance grid share these: the same seed gives the same
events, keys and partitions, so an expected output can be recomputed from the input.

    python -m cutover.cli.orders --bootstrap 127.0.0.1:9092 --topic orders.in --count 2000
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Sequence

from confluent_kafka import Producer
from pydantic import BaseModel, ConfigDict, Field

from cutover.topic_admin import create_topics, partition_count
from spark_tagger.partitioner import partition_for

COUNTRIES = ("DE", "FR", "US", "GB", "JP")


class EventSpec(BaseModel):
    """How to generate an input stream of orders."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 7
    count: int = Field(default=1000, ge=0)
    customers: int = Field(default=12, ge=1)
    start_ms: int = 1_767_225_600_000          # 2026-01-01T00:00:00Z
    step_ms: int = Field(default=250, ge=1)    # mean event-time spacing
    max_disorder_ms: int = Field(default=2_000, ge=0)  # how far an event may lag the newest one
    # >0: one last event this far ahead of the others (its watermark closes their windows)
    closing_gap_ms: int = Field(default=0, ge=0)


class Order(BaseModel):
    """One input event (the JSON value of an input record; the key is ``customer``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    order_id: str
    customer: str
    country: str
    amount: float
    ts: int  # event time, epoch milliseconds

    @property
    def key(self) -> bytes:
        return self.customer.encode()

    @property
    def value(self) -> bytes:
        return self.model_dump_json().encode()


def make_orders(spec: EventSpec) -> list[Order]:
    """Events in write order: event time grows by step_ms, each lagging by <= max_disorder_ms."""
    rng = random.Random(spec.seed)
    out = []
    for i in range(spec.count):
        base = spec.start_ms + i * spec.step_ms
        lag = rng.randint(0, spec.max_disorder_ms) if spec.max_disorder_ms else 0
        out.append(Order(
            order_id=f"o-{spec.seed}-{i:07d}",
            customer=f"c{rng.randrange(spec.customers):03d}",
            country=rng.choice(COUNTRIES),
            amount=round(rng.uniform(1, 250), 2),
            ts=max(spec.start_ms, base - lag),
        ))
    if spec.closing_gap_ms and spec.count:
        last = spec.start_ms + (spec.count - 1) * spec.step_ms + spec.closing_gap_ms
        out.append(Order(order_id=f"o-{spec.seed}-close", customer="c000", country="DE",
                         amount=1.0, ts=last))
    return out


class OrdersNotWritten(RuntimeError):
    """The broker did not take every order (the message names the topic and the errors)."""


def write_orders(bootstrap: str, topic: str, orders: Iterable[Order],
                 partitions: int | None = None) -> int:
    """Produce the orders keyed by customer, on Kafka's default partition for the key."""
    if partitions is not None:
        create_topics(bootstrap, {topic: partitions})
    n = partition_count(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    errors: list[str] = []
    count = 0
    for order in orders:
        producer.produce(topic, key=order.key, value=order.value,
                         partition=partition_for(order.key, None, n),
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        producer.poll(0)
        count += 1
    if producer.flush(60) or errors:
        raise OrdersNotWritten(f"writing input to {topic} failed: {errors[:3]}")
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write deterministic order events to Kafka")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=None,
                        help="create the topic with this many partitions first")
    for name, field in EventSpec.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=field.default)
    args = parser.parse_args(argv)
    spec = EventSpec(**{k: getattr(args, k) for k in EventSpec.model_fields})
    n = write_orders(args.bootstrap, args.topic, make_orders(spec), args.partitions)
    print(json.dumps({"topic": args.topic, "written": n, "spec": spec.model_dump()}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
