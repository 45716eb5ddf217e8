"""Spark on Kubernetes (deploy/spark-k8s): each version's manifest runs the job under the
tagger (client mode: the driver pod is `cutover tag` with spark-submit's k8s master; the Spark
operator: its driver program is tag_driver.py, `cutover tag` itself), and the commands that
`cutover rollout` runs as --start / --stop-old are idempotent. No cluster here: the commands run
against a stand-in kubectl that keeps objects in a file (fake_kubectl.py), and in --dry-run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from cutover.cli import build_parser
from spark_tagger.cli import submit_args
from tests.deploy.chart import kubecheck

ROOT = Path(__file__).resolve().parents[2]
SPARK_K8S = ROOT / "deploy" / "spark-k8s"
SCRIPT = SPARK_K8S / "spark_job.py"
FAKE_SOURCE = Path(__file__).with_name("fake_kubectl.py")

pytestmark = pytest.mark.deploy


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_job", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["spark_job"] = module
    spec.loader.exec_module(module)
    return module


spark_job = load_script()
JOB = spark_job.load_job(SPARK_K8S / "job.yaml")


def operator_job() -> Any:
    return JOB.model_copy(update={"mode": "operator"})


def test_the_client_mode_driver_is_cutover_tag_with_a_kubernetes_master() -> None:
    deployment = spark_job.client_manifest(JOB, "green")
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "never two drivers at once"
    (driver,) = deployment["spec"]["template"]["spec"]["containers"]
    assert driver["image"] == JOB.versions["green"].image
    argv = driver["args"]
    assert argv[:2] == ["cutover", "tag"]
    tag = build_parser("tag").parse_args(argv[1:])
    assert tag.version == "green"
    assert tag.job == JOB.versions["green"].job
    assert "/checkpoints/green" in tag.job_args
    conf = dict(c.split("=", 1) for c in tag.conf)
    assert conf["spark.master"].startswith("k8s://https://")
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.kubernetes.container.image"] == JOB.versions["green"].image
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in driver["env"]}
    assert env == {"POD_IP": "status.podIP", "POD_NAME": "metadata.name"}
    # What pyspark hands to spark-submit: the spark-submit command line of the driver.
    line = submit_args(None, tag.conf)
    assert f"--conf spark.master={JOB.master}" in line and line.endswith("pyspark-shell")


def test_the_spark_application_runs_tag_driver_py_with_cutover_tags_arguments() -> None:
    app = spark_job.operator_manifest(operator_job(), "green")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    assert spec["mainApplicationFile"] == "local:///opt/cutover/tag_driver.py"
    tag = build_parser("tag").parse_args(["tag", *spec["arguments"]])
    assert tag.version == "green" and tag.job == JOB.versions["green"].job
    assert spec["image"] == JOB.versions["green"].image
    assert spec["sparkVersion"] == JOB.sparkVersion
    assert spec["driver"]["serviceAccount"] == JOB.serviceAccount
    assert spec["executor"]["instances"] == JOB.executor.instances
    assert spec["restartPolicy"]["type"] == "Always"
    dockerfile = (ROOT / "docker" / "Dockerfile.spark-job").read_text()
    assert "COPY deploy/spark-k8s/tag_driver.py /opt/cutover/tag_driver.py" in dockerfile


def test_versions_get_objects_and_checkpoints_of_their_own() -> None:
    blue = spark_job.client_manifest(JOB, "blue")
    green = spark_job.client_manifest(JOB, "green")
    assert blue["metadata"]["name"] != green["metadata"]["name"]
    assert blue["metadata"]["labels"]["cutover.io/version"] == "blue"

    def checkpoint(d: dict[str, Any]) -> str:
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        return str(args[args.index("--checkpoint") + 1])

    assert checkpoint(blue) == "/checkpoints/blue" and checkpoint(green) == "/checkpoints/green"


def test_the_driver_deployment_and_the_rbac_decode_strictly_as_kubernetes_types() -> None:
    docs = [spark_job.client_manifest(JOB, v) for v in JOB.versions]
    docs += list(yaml.safe_load_all((SPARK_K8S / "rbac.yaml").read_text()))
    verdicts = kubecheck(docs)
    assert set(verdicts.values()) == {"valid"}, verdicts
    app = spark_job.operator_manifest(operator_job(), "green")
    assert kubecheck([app]) == {"SparkApplication totals-green": "unknown"}


def test_the_rbac_example_lets_the_driver_manage_its_executor_pods() -> None:
    docs = list(yaml.safe_load_all((SPARK_K8S / "rbac.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert kinds["ServiceAccount"]["metadata"]["name"] == JOB.serviceAccount
    (rule,) = kinds["Role"]["rules"]
    assert "pods" in rule["resources"] and {"create", "delete", "watch"} <= set(rule["verbs"])
    assert kinds["RoleBinding"]["subjects"][0]["name"] == JOB.serviceAccount
    assert all(d["metadata"]["namespace"] == JOB.namespace for d in docs)


def fake_kubectl(state: Path) -> Path:
    """An executable beside the state file that runs fake_kubectl.py with this Python."""
    path = state.with_name("kubectl")
    if not path.exists():
        path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SOURCE} \"$@\"\n")
        path.chmod(0o755)
    return path


def run(*args: str, state: Path | None = None, job: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    argv = [sys.executable, str(SCRIPT), "--job", str(job or SPARK_K8S / "job.yaml")]
    if state is not None:
        env["FAKE_KUBE_STATE"] = str(state)
        argv += ["--kubectl", str(fake_kubectl(state))]
    return subprocess.run([*argv, *args], capture_output=True, text=True, env=env, timeout=60)


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in Path(f"{state}.log").read_text().splitlines()]


@pytest.fixture
def operator_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    data = yaml.safe_load((SPARK_K8S / "job.yaml").read_text())
    path.write_text(yaml.safe_dump({**data, "mode": "operator"}))
    return path


def test_render_prints_the_manifest_that_start_applies(tmp_path: Path) -> None:
    done = run("render", "green")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == spark_job.client_manifest(JOB, "green")


def test_dry_run_prints_the_commands_and_runs_nothing() -> None:
    start = run("--dry-run", "--kubectl", "/nonexistent/kubectl", "start", "green")
    assert start.returncode == 0, start.stderr
    assert "would run: /nonexistent/kubectl apply -f -" in start.stdout
    assert "rollout status deployment/totals-green -n streaming" in start.stdout
    stop = run("--dry-run", "--kubectl", "/nonexistent/kubectl", "stop", "blue")
    assert stop.returncode == 0, stop.stderr
    assert "delete deployment/totals-blue -n streaming --ignore-not-found" in stop.stdout


@pytest.mark.parametrize("mode", ["client", "operator"])
def test_start_and_stop_are_idempotent(tmp_path: Path, operator_file: Path, mode: str) -> None:
    state = tmp_path / "cluster.json"
    job = operator_file if mode == "operator" else None
    for _ in range(2):
        done = run("--no-watch", "start", "green", state=state, job=job)
        assert done.returncode == 0, done.stderr
        assert "green: driver running" in done.stdout
    kind = "deployment" if mode == "client" else "sparkapplication"
    assert set(json.loads(state.read_text())) == {f"{kind}/totals-green"}
    assert [c[0] for c in calls(state)].count("apply") == 2
    for _ in range(2):
        done = run("stop", "green", state=state, job=job)
        assert done.returncode == 0, done.stderr
    assert json.loads(state.read_text()) == {}
    done = run("stop", "blue", state=state, job=job)
    assert done.returncode == 0, "stopping a version that is not there succeeds"


def wait_until_watching(state: Path) -> None:
    """Until start has applied the manifest, seen the driver start and asked for it again."""
    log = Path(f"{state}.log")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if log.exists() and any(c[0] == "get" for c in calls(state)):
            return
        time.sleep(0.1)
    raise AssertionError("start never began watching the driver")


def test_start_keeps_running_while_the_driver_runs_and_exits_1_when_it_dies(
        tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    env = {**os.environ, "FAKE_KUBE_STATE": str(state)}
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--kubectl", str(fake_kubectl(state)), "--poll",
         "0.2", "--down-for", "1", "start", "green"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until_watching(state)
        time.sleep(1.0)
        assert child.poll() is None, "start returned while the driver runs"
        objects = json.loads(state.read_text())
        objects["deployment/totals-green"]["status"] = {"availableReplicas": 0}
        state.write_text(json.dumps(objects))
        _, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 1, err
    assert "green: the driver has not been running for 1 s" in err


def test_start_exits_1_when_the_version_is_deleted(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    env = {**os.environ, "FAKE_KUBE_STATE": str(state)}
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--kubectl", str(fake_kubectl(state)), "--poll",
         "0.2", "start", "green"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until_watching(state)
        assert run("stop", "green", state=state).returncode == 0
        _, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == 1 and "green: the driver is gone" in err


def test_an_unknown_version_or_a_bad_job_file_is_a_sentence(tmp_path: Path) -> None:
    done = run("render", "purple")
    assert done.returncode == 2
    assert "version 'purple' is not in the job file" in done.stderr
    bad = tmp_path / "job.yaml"
    bad.write_text("name: totals\nnamespace: streaming\nserviceAccount: x\nversions: {}\n"
                   "extra: 1\n")
    done = run("render", "blue", job=bad)
    assert done.returncode == 2 and "extra" in done.stderr and "Traceback" not in done.stderr
