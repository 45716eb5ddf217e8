"""docker/compose.yaml's init and feed services, their commands run for real against the suite's
Apache Kafka broker (no container engine here): init creates the route's topics and the jobs'
input and publishes the first plan, and changes nothing when rerun (compose reruns it when a
service that depends on it is started, as the rollout's `up job-green` does); one round of the
feed writes its orders with event times at wall-clock time. Only the broker's address, the
file paths and the executables differ from the containers'.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
VENV_BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.deploy, pytest.mark.broker]


@pytest.fixture
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def local_settings(tmp: Path, bootstrap: str, tag: str) -> Path:
    """docker/router.yaml with this broker and topic names of this test's own."""
    text = (ROOT / "docker" / "router.yaml").read_text()
    data = yaml.safe_load(text)
    data["bootstrap"] = bootstrap
    data["control_topic"], data["status_topic"] = f"ctl-{tag}", f"st-{tag}"
    data["group_id"] = f"g-{tag}"
    for route in data["routes"]:
        route["inputs"] = [f"{t}-{tag}" for t in route["inputs"]]
        route["output"] = f"{route['output']}-{tag}"
        route["dead_letter"] = f"{route['dead_letter']}-{tag}"
    path = tmp / "router.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def script_of(service: dict[str, Any]) -> str:
    assert service["entrypoint"] == ["/bin/sh", "-ec"]
    return "\n".join(service["command"]).replace("$$", "$")


def test_init_then_one_round_of_the_feed(compose: dict[str, Any], bootstrap: str,
                                         tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    settings = local_settings(tmp_path, bootstrap, tag)
    init = (script_of(compose["services"]["init"])
            .replace("/etc/cutover/router.yaml", str(settings))
            .replace("/opt/cutover-init/create_topics.py",
                     str(ROOT / "deploy/helm/cutover-router/files/create_topics.py"))
            .replace("python ", f"{sys.executable} ")
            .replace("cutover plan", f"{VENV_BIN / 'cutover'} plan")
            .replace("--also orders", f"--also orders-{tag}"))
    for attempt in range(2):
        done = subprocess.run(["/bin/sh", "-ec", init], capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, f"run {attempt}: {done.stdout}{done.stderr}"
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(topics[f"orders-{tag}"].partitions) == 4
    assert len(topics[f"customer_totals.raw-{tag}"].partitions) == 4
    shown = subprocess.run([str(VENV_BIN / "cutover"), "plan", "show", "--config",
                            str(settings), "--route", "totals", "--json"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    plan = json.loads(shown.stdout)
    assert plan["epoch"] == 1 and plan["segments"][0]["primary"] == "blue"

    loop = script_of(compose["services"]["feed"])
    one_round = loop.split("do\n", 1)[1].split("sleep")[0]
    one_round = (one_round.replace("kafka:9092", bootstrap)
                 .replace("--topic orders", f"--topic orders-{tag}")
                 .replace("python -m", f"{sys.executable} -m"))
    before = int(time.time() * 1000)
    done = subprocess.run(["/bin/sh", "-ec", one_round], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"feed-{tag}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(f"orders-{tag}", p, 0) for p in range(4)])
    orders: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(orders) < 240 and time.monotonic() < deadline:
        orders += [json.loads(m.value()) for m in consumer.consume(500, timeout=1.0)
                   if m.error() is None]
    consumer.close()
    assert len(orders) == 240
    times = sorted(o["ts"] for o in orders)
    assert before - 5_000 <= times[0] <= before + 5_000, "event time starts at wall-clock time"
    assert times[-1] - times[0] <= 60_000 + 5_000, "one minute of event time per round"
