"""Static membership on the real broker: a worker killed with -9 and started again with the same
``--instance-id`` (its ``group.instance.id``) within the session timeout takes its own partitions
back at once, the other worker keeps its partitions throughout, and the output holds every
event exactly once. This is what a StatefulSet pod restarted under its own name relies on
(deploy/: the pod name is the instance id). Part of ``make test-kafka39`` too."""

from __future__ import annotations

from pathlib import Path

import pytest

from testground.brokers import BrokerUnderTest
from tests.integration.harness import (
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
    takeovers,
)

pytestmark = pytest.mark.broker

# Long enough for a killed worker to start again under load; the broker's own bound
# (group.max.session.timeout.ms) is 30 minutes by default.
SESSION_MS = 60_000


def test_a_worker_restarted_with_its_instance_id_takes_its_partitions_back_alone(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership")
    env = Env(broker.bootstrap, tmp_path, partitions=4)
    config = env.write_config("static.yaml", kafka={"session.timeout.ms": SESSION_MS,
                                                    "heartbeat.interval.ms": 500})
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    a = RouterProcess(env, config, name="a", args=("--instance-id", "worker-a"))
    b = RouterProcess(env, config, name="b", args=("--instance-id", "worker-b"))
    restarted: RouterProcess | None = None
    try:
        a.wait_started()
        b.wait_started()
        env.wait_for("the four partitions split between the two workers", lambda: bool(
            takeovers(a) and takeovers(b)
            and takeovers(a)[-1] | takeovers(b)[-1] == set(range(4))
            and not takeovers(a)[-1] & takeovers(b)[-1]), 90)
        blue = Job(env, "blue")
        blue.emit(events(0, 400))
        env.wait_output(400)
        owned_by_a, b_assignments = takeovers(a)[-1], len(takeovers(b))
        b_before = len(b.text())   # b's log up to the kill (its own start moved partitions)

        a.kill9()
        blue.emit(events(400, 800))    # half of it waits, in a's partitions, for a to return
        restarted = RouterProcess(env, config, name="a-again", args=("--instance-id",
                                                                     "worker-a"))
        restarted.wait_started(timeout=SESSION_MS / 1000)
        env.wait_output(800)
        check_output(env, events(0, 800), lambda p, t: "blue")

        # its own partitions at once, and no other; the one rebalance it then starts
        # (router.worker.orphans) moves nothing
        assert takeovers(restarted)[0] == owned_by_a, restarted.tail(40)
        assert all(t == owned_by_a for t in takeovers(restarted)), restarted.tail(40)
        owned_by_b = takeovers(b)[b_assignments - 1]
        assert all(t == owned_by_b for t in takeovers(b)[b_assignments:]), \
            f"b's partitions moved:\n{b.tail(40)}"
        assert "partitions lost" not in b.text()[b_before:]
        assert "released partitions" not in b.text()[b_before:], b.tail(40)
        b.assert_alive()
        restarted.assert_alive()
    finally:
        for worker in (a, b, restarted):
            if worker is not None:
                worker.stop()
