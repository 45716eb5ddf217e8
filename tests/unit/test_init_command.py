"""``cutover init`` on the suite's broker: the route's topics made with the right configs, the
ACLs of each principal printed, the first plan published; run again it changes nothing; a
topic that does not fit is refused with what to do."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from cutover.cli import main
from cutover.cli.route_topics import TopicRole, TopicSpec, route_topics, topic_problem
from cutover.settings import parse_settings
from testground.brokers import create_topics


def _settings(tmp_path: Path, bootstrap: str, name: str) -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(f"bootstrap: {bootstrap}\ncontrol_topic: {name}.control\n"
                    f"status_topic: {name}.status\ngroup_id: {name}-router\n"
                    f"routes: [{{name: {name}, inputs: [{name}.raw], output: {name}.out}}]\n")
    return path


def _describe(bootstrap: str, names: list[str]) -> dict[str, tuple[int, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10).topics
    futs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names])
    policy = {r.name: f.result()["cleanup.policy"].value for r, f in futs.items()}
    return {n: (len(md[n].partitions), policy[n]) for n in names}


def test_init_creates_the_topics_prints_the_acls_and_publishes_the_first_plan(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"init-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {f"{name}.raw": 3})
    config = _settings(tmp_path, bootstrap, name)
    assert main(["init", "--config", str(config), "--route", name, "--primary", "blue"]) == 0
    out = capsys.readouterr().out
    topics = _describe(bootstrap, [f"{name}.out", f"{name}.out.dlq", f"{name}.control",
                                   f"{name}.status", f"{name}-router.checkpoints"])
    assert topics[f"{name}.out"] == (3, "delete")
    assert topics[f"{name}.out.dlq"] == (3, "delete")
    for compacted in (f"{name}.control", f"{name}.status", f"{name}-router.checkpoints"):
        assert topics[compacted] == (1, "compact"), compacted
    assert f"--allow-principal User:cutover-router --operation Read --topic {name}.raw" in out
    assert (f"--allow-principal User:cutover-operator --operation Write --topic "
            f"{name}.control") in out
    assert f"--allow-principal User:cutover-job --operation Write --topic {name}.raw" in out
    assert f"published the first plan of route {name}: blue is primary (epoch 1)" in out

    assert main(["init", "--config", str(config), "--route", name, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert not again["plan_published"] and again["plan"]["epoch"] == 1
    assert not any(t["created"] for t in again["topics"]) and again["partitions"] == 3
    assert main(["plan", "show", "--config", str(config), "--route", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["segments"][0]["primary"] == "blue"
    # one primary, no transition: wait says so, as an exit code and as JSON
    assert main(["wait", "--config", str(config), "--route", name, "--timeout", "5s",
                 "--json"]) == 5
    waited = capsys.readouterr()
    outcome = json.loads(waited.out)
    assert (outcome["exit_code"], outcome["state"]) == (5, "STEADY")
    assert "no transition in plan epoch 1" in waited.err


def test_init_creates_a_missing_raw_topic_only_when_told_how_many_partitions(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"init-{uuid.uuid4().hex[:8]}"
    config = _settings(tmp_path, bootstrap, name)
    assert main(["init", "--config", str(config), "--route", name, "--primary", "blue"]) == 2
    err = capsys.readouterr().err
    assert f"raw topic {name}.raw does not exist yet; pass --partitions N" in err
    assert main(["init", "--config", str(config), "--route", name, "--primary", "blue",
                 "--partitions", "2"]) == 0
    assert _describe(bootstrap, [f"{name}.raw", f"{name}.out"]) == {
        f"{name}.raw": (2, "delete"), f"{name}.out": (2, "delete")}


def test_init_refuses_an_output_whose_partitions_differ_from_the_raw_topic(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"init-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {f"{name}.raw": 3, f"{name}.out": 2})
    config = _settings(tmp_path, bootstrap, name)
    assert main(["init", "--config", str(config), "--route", name, "--primary", "blue"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"output topic {name}.out has 2 partitions, the raw topic has 3" in err[0]
    assert "kafka-topics.sh --alter" in err[0]


def test_the_route_topics_are_sized_by_the_raw_topic_and_state_topics_are_compacted() -> None:
    s = parse_settings({"bootstrap": "k:9092", "routes": [
        {"name": "orders", "inputs": ["orders.raw"], "output": "orders", "shadow": "orders.sh"}]})
    specs = {t.role: t for t in route_topics(s, s.routes[0], 6)}
    assert {r: (t.name, t.partitions, t.compacted) for r, t in specs.items()} == {
        TopicRole.RAW: ("orders.raw", 6, False), TopicRole.OUTPUT: ("orders", 6, False),
        TopicRole.DEAD_LETTER: ("orders.dlq", 6, False), TopicRole.SHADOW: ("orders.sh", 6, False),
        TopicRole.CONTROL: ("bg.control", 1, True), TopicRole.STATUS: ("bg.status", 1, True),
        TopicRole.CHECKPOINTS: ("cutover-router.checkpoints", 1, True)}
    assert specs[TopicRole.OUTPUT].min_retention_ms == 3_600_000


def test_an_output_that_forgets_sooner_than_the_dedup_retention_is_a_problem() -> None:
    spec = TopicSpec(name="orders", role=TopicRole.OUTPUT, partitions=3,
                     min_retention_ms=3_600_000)
    assert topic_problem(spec, 3, {"retention.ms": "-1"}) is None
    assert topic_problem(spec, 3, {"retention.ms": "604800000"}) is None
    problem = topic_problem(spec, 3, {"retention.ms": "60000"})
    assert problem is not None and "retention.ms=3600000" in problem
    control = TopicSpec(name="bg.control", role=TopicRole.CONTROL, partitions=1, compacted=True)
    problem = topic_problem(control, 1, {"cleanup.policy": "delete"})
    assert problem is not None and "cleanup.policy=compact" in problem


def test_with_skip_topics_init_creates_nothing_and_names_what_is_missing(
        bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"init-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {f"{name}.raw": 2})
    config = _settings(tmp_path, bootstrap, name)
    assert main(["init", "--config", str(config), "--route", name, "--primary", "blue",
                 "--skip-topics"]) == 2
    err = capsys.readouterr().err
    assert f"output topic {name}.out does not exist (--skip-topics: create it with 2 " \
           "partitions)" in err
    assert f"control topic {name}.control does not exist" in err and "cleanup.policy=compact" \
        in err
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert f"{name}.out" not in admin.list_topics(timeout=10).topics
