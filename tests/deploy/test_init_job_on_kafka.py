"""The chart's init Job, run for real against the suite's Apache Kafka broker: the script the
chart renders (`cutover init` for each route, on the settings file the chart renders) creates
every topic with the right partitions and cleanup policy, publishes the route's first plan,
and changes nothing when run again. Only the paths
differ from the pod's: the rendered files are written to a folder instead of being mounted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource

from testground.brokers import create_topics
from tests.deploy.chart import Rendered, render

pytestmark = [pytest.mark.deploy, pytest.mark.broker]
VENV_BIN = Path(sys.executable).parent


def values(bootstrap: str, tag: str) -> dict[str, Any]:
    return {
        "settings": {
            "bootstrap": bootstrap, "control_topic": f"ctl-{tag}", "status_topic": f"st-{tag}",
            "group_id": f"g-{tag}",
            "routes": [{"name": f"r-{tag}", "inputs": [f"raw-{tag}"], "output": f"out-{tag}",
                        "dead_letter": f"dlq-{tag}"}],
        },
        "init": {"partitions": 3, "firstPrimary": "blue"},
    }


def job_script(r: Rendered, folder: Path) -> str:
    """The Job's script with the ConfigMap's files written to ``folder``."""
    for name, text in r.one("ConfigMap", "-init")["data"].items():
        (folder / name).write_text(text)
    (container,) = r.one("Job")["spec"]["template"]["spec"]["containers"]
    script = str(container["args"][0])
    return (script.replace("/etc/cutover/init/", f"{folder}/")
            .replace("cutover init", f"{VENV_BIN / 'cutover'} init"))


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True,
                          timeout=180)


def plan_of(bootstrap: str, tag: str) -> dict[str, Any]:
    done = subprocess.run([str(VENV_BIN / "cutover"), "plan", "show", "--bootstrap", bootstrap,
                           "--control-topic", f"ctl-{tag}", "--status-topic", f"st-{tag}",
                           "--route", f"r-{tag}", "--json"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def test_the_init_job_creates_the_topics_and_the_first_plan_once(
        bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    r = render(tmp_path, values(bootstrap, tag), release=f"t{tag}")
    script = job_script(r, tmp_path)

    first = run_script(script)
    assert first.returncode == 0, first.stdout + first.stderr
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=10).topics
    for name in (f"raw-{tag}", f"out-{tag}", f"dlq-{tag}"):
        assert len(topics[name].partitions) == 3, name
    compacted = [f"ctl-{tag}", f"st-{tag}", f"g-{tag}.checkpoints"]
    for name in compacted:
        assert len(topics[name].partitions) == 1, name
    described = admin.describe_configs([ConfigResource("topic", n) for n in compacted])
    for resource, future in described.items():
        assert future.result()["cleanup.policy"].value == "compact", resource.name
    plan = plan_of(bootstrap, tag)
    assert plan["epoch"] == 1
    assert plan["segments"] == [{"from_event_time": None, "primary": "blue"}]

    again = run_script(script)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "exists" in again.stdout and "created" not in again.stdout
    assert plan_of(bootstrap, tag)["epoch"] == 1, "a rerun must not publish another plan"


def test_a_topic_with_another_partition_count_fails_the_job_with_a_sentence(
        bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    create_topics(bootstrap, {f"out-{tag}": 2})
    r = render(tmp_path, values(bootstrap, tag), release=f"t{tag}")
    done = run_script(job_script(r, tmp_path))
    assert done.returncode != 0
    assert f"out-{tag} has 2 partitions, the raw topic has 3" in done.stderr
    assert "Traceback" not in done.stderr
    assert yaml.safe_load(r.one("ConfigMap", "-init")["data"]["router.yaml"])["bootstrap"] \
        == bootstrap
