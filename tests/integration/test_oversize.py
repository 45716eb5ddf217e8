"""A record larger than the output topic takes is dead-lettered, and its partition goes on.

Before, the broker refused it, the batch was aborted and replayed, and the record was refused
again: the partition made no progress, forever. Both output paths: produced as decided into
the batch's transaction (transactions on) and queued for the batch's end (off)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from router.base.kafka_io import base_conf, read_to_end
from testground.brokers import BrokerUnderTest
from tests.integration.harness import (
    Env,
    Event,
    Job,
    RouterProcess,
    check_output,
    events,
    run_cli_json,
)

pytestmark = pytest.mark.broker

LIMIT = 20_000
N = 1000
BIG = {250, 251, 700}


class BigRecords(Job):
    """Blue, with a few records over the output topic's limit."""

    def value(self, e: Event) -> bytes:
        if e.i in BIG:
            return json.dumps({"id": e.i, "t": e.t, "by": self.version,
                               "pad": "x" * (2 * LIMIT)}).encode()
        return super().value(e)


def _limit(env: Env, topics: list[str]) -> None:
    admin = AdminClient(base_conf(env.bootstrap))
    futures = admin.incremental_alter_configs([
        ConfigResource("topic", t, incremental_configs=[ConfigEntry(
            "max.message.bytes", str(LIMIT),
            incremental_operation=AlterConfigOpType.SET)]) for t in topics])
    for future in futures.values():
        future.result(15)


@pytest.mark.parametrize("transactions", ["auto", "off"])
def test_a_record_over_the_output_topics_limit_is_dead_lettered(
        broker: BrokerUnderTest, tmp_path: Path, transactions: str) -> None:
    if broker.kind == "tansu":
        pytest.skip("the test broker does not take topic configuration changes")
    env = Env(broker.bootstrap, tmp_path, partitions=2, transactions=transactions)
    _limit(env, [env.output, env.dlq])
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue = BigRecords(env, "blue")
        for lo in range(0, N, 100):
            blue.emit(events(lo, lo + 100))
        small = [e for e in events(0, N) if e.i not in BIG]
        env.wait_output(len(small))
        check_output(env, small, lambda p, t: "blue")
        dead = list(read_to_end({**base_conf(env.bootstrap),
                                 "isolation.level": "read_committed"}, env.dlq))
        assert sorted(m.key() for m in dead) == sorted(Event(i).key for i in BIG)
        for m in dead:
            h = dict(m.headers() or ())
            assert m.value() is None
            reason = h["bg.error"].decode()
            assert "over the" in reason and "max.message.bytes" in reason, reason
            topic, p, off = h["bg.src"].decode().rsplit(":", 2)
            assert topic == env.inputs[0] and int(p) == m.partition() and int(off) >= 0
        env.wait_for("the status counting them", lambda: run_cli_json(env)["counters"]
                     ["dead_lettered"] == len(BIG))
        assert run_cli_json(env)["counters"]["forwarded"] == len(small)
        router.assert_alive()
        assert router.text().count("took over partitions") == 1, "the worker restarted"
    finally:
        router.stop()
