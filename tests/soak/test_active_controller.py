"""Which node a "controller killed" fault hits: the newest leader any voter recorded.

Each KRaft voter rewrites ``__cluster_metadata-0/quorum-state`` when it learns an election's
result (the files below are what Apache Kafka 4.1 writes); a node killed or frozen keeps an old
file, so the newest epoch wins, not the first file read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cutover.topic_admin import BrokerError
from testground.kafka_broker import KafkaCluster, KafkaNode


def _cluster(root: Path, states: dict[int, tuple[int, int] | None]) -> KafkaCluster:
    cluster = KafkaCluster(size=3, root=root, broker_defaults=True)
    cluster.nodes = [KafkaNode(i, port=9000 + i, controller_port=9100 + i) for i in states]
    for node_id, state in states.items():
        if state is None:
            continue
        leader, epoch = state
        path = root / f"node-{node_id}" / "data" / "__cluster_metadata-0" / "quorum-state"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({
            "clusterId": "", "leaderId": leader, "leaderEpoch": epoch, "votedId": -1,
            "appliedOffset": 0, "currentVoters": [{"voterId": 1}, {"voterId": 2},
                                                  {"voterId": 3}], "data_version": 0}))
    return cluster


def test_the_newest_epoch_names_the_active_controller(tmp_path: Path) -> None:
    # Node 1 led epoch 1 and was killed; nodes 2 and 3 elected node 3 in epoch 2.
    cluster = _cluster(tmp_path, {1: (1, 1), 2: (3, 2), 3: (3, 2)})
    assert cluster.active_controller() == 3


def test_a_voter_before_any_election_is_not_a_leader(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, {1: (-1, 0), 2: (2, 1), 3: None})
    assert cluster.active_controller() == 2
    with pytest.raises(BrokerError, match="no node of the cluster has recorded a quorum leader"):
        _cluster(tmp_path / "fresh", {1: (-1, 0), 2: None, 3: None}).active_controller()


def test_broker_defaults_need_three_nodes() -> None:
    with pytest.raises(BrokerError, match="need three nodes or more"):
        KafkaCluster(size=1, broker_defaults=True).start()


def test_broker_defaults_set_only_the_cluster_shape(tmp_path: Path) -> None:
    """No test-only shortcut (rebalance delay, short sessions, fast death notice) reaches the
    fault cells' and the soak's brokers; the test profile keeps them."""
    shapes = ("process.roles", "node.id", "controller.quorum.voters", "listeners",
              "advertised.listeners", "controller.listener.names", "inter.broker.listener.name",
              "listener.security.protocol.map", "log.dirs", "auto.create.topics.enable",
              "default.replication.factor", "min.insync.replicas")
    for defaults, root in ((True, tmp_path / "d"), (False, tmp_path / "t")):
        cluster = _cluster(root, {1: None, 2: None, 3: None})
        cluster.broker_defaults = defaults
        cluster._write_config(cluster.nodes[0])
        props = dict(line.split("=", 1) for line in
                     (root / "node-1" / "server.properties").read_text().splitlines())
        assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
        if defaults:
            assert set(props) == set(shapes)
        else:
            assert props["group.initial.rebalance.delay.ms"] == "0"
