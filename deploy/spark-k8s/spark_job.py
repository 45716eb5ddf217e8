"""One version of a streaming job on Kubernetes, for `cutover rollout --start / --stop-old`.

    spark_job.py --job job.yaml render VERSION   # print the version's manifest
    spark_job.py --job job.yaml start VERSION    # apply it, wait for its driver, then watch it
    spark_job.py --job job.yaml stop VERSION     # delete it and wait until it is gone

`start` keeps running while the driver runs, as `cutover rollout --start` expects of the new
version's command, and exits 1 when the driver is gone or has been down for `--down-for`
seconds (the rollout then rolls back). Both commands are idempotent: `start` on a running
version applies an unchanged manifest and watches it again; `stop` on a version that is not
there succeeds. `--dry-run` prints the kubectl commands and the manifest instead of running
them. Needs kubectl on PATH (or `--kubectl`) with a context allowed to manage the namespace.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

VERSION_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# SparkApplication states (the Spark operator's applicationState.state).
APP_RUNNING = "RUNNING"
APP_ENDED = frozenset({"COMPLETED", "FAILED", "SUBMISSION_FAILED", "UNKNOWN"})


class PlainDumper(yaml.SafeDumper):
    """YAML without anchors: each manifest reads as written, shared label maps repeated."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=PlainDumper, sort_keys=False)


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cores: int = Field(default=1, ge=1)
    memory: str = "2g"
    instances: int = Field(default=1, ge=1)


class Checkpoints(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    claimName: str = Field(pattern=K8S_NAME_PATTERN)
    mountPath: str = "/checkpoints"


class Version(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1)
    job: str = Field(min_length=1, description="the job's file inside the image")


class JobSpec(BaseModel):
    """job.yaml: one streaming job, its versions, and how it runs on Kubernetes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=K8S_NAME_PATTERN, max_length=40)
    namespace: str = Field(pattern=K8S_NAME_PATTERN)
    serviceAccount: str = Field(pattern=K8S_NAME_PATTERN)
    mode: Literal["client", "operator"] = "client"
    sparkVersion: str = "4.2.0"
    master: str = "k8s://https://kubernetes.default.svc:443"
    driver: Resources = Resources()
    executor: Resources = Resources(instances=2)
    checkpoints: Checkpoints | None = None
    conf: dict[str, str] = {}
    args: tuple[str, ...] = ()
    versions: dict[str, Version] = Field(min_length=1)

    def version(self, version: str) -> Version:
        if version not in self.versions:
            raise JobError(f"version {version!r} is not in the job file (it has "
                           f"{', '.join(sorted(self.versions))}); add it under versions:")
        return self.versions[version]


class JobError(Exception):
    """A job file or a cluster state that stops the command; the message says what to do."""


def load_job(path: Path) -> JobSpec:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise JobError(f"cannot read the job file {path} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise JobError(f"{path} is not valid YAML ({exc})") from None
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise JobError(f"{path}: " + "; ".join(lines)) from None


def object_name(job: JobSpec, version: str) -> str:
    """The Kubernetes name of a version's driver (Deployment) or SparkApplication."""
    if not re.match(VERSION_PATTERN, version):
        raise JobError(f"{version!r} is not a version id (1-64 of A-Z a-z 0-9 . _ -)")
    slug = re.sub(r"[^a-z0-9-]", "-", version.lower()).strip("-")[:20] or "v"
    return f"{job.name}-{slug}"


def labels(job: JobSpec, version: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": job.name, "app.kubernetes.io/part-of": "cutover",
            "cutover.io/version": version}


def job_args(job: JobSpec, version: str) -> list[str]:
    return [a.replace("{version}", version) for a in job.args]


def spark_conf(job: JobSpec, version: str) -> dict[str, str]:
    """Spark settings shared by both modes (executors, image, checkpoints volume)."""
    v = job.version(version)
    conf = {
        "spark.kubernetes.namespace": job.namespace,
        "spark.kubernetes.container.image": v.image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": job.serviceAccount,
        "spark.executor.instances": str(job.executor.instances),
        "spark.executor.cores": str(job.executor.cores),
        "spark.executor.memory": job.executor.memory,
        "spark.kubernetes.executor.podNamePrefix": object_name(job, version),
    }
    for key, value in labels(job, version).items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    if job.checkpoints is not None:
        prefix = "spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoints"
        conf[f"{prefix}.mount.path"] = job.checkpoints.mountPath
        conf[f"{prefix}.options.claimName"] = job.checkpoints.claimName
    conf.update(job.conf)
    return conf


def client_manifest(job: JobSpec, version: str) -> dict[str, Any]:
    """A Deployment of one pod that is the driver: `cutover tag` in spark-submit's client mode
    (its --conf settings become PYSPARK_SUBMIT_ARGS, which pyspark hands to spark-submit)."""
    v = job.version(version)
    name = object_name(job, version)
    conf = {
        "spark.master": job.master,
        "spark.submit.deployMode": "client",
        # Executors connect back to the driver pod by its IP; with the pod's name set, the
        # executors are owned by it and deleted with it.
        "spark.driver.host": "$(POD_IP)",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": "7078",
        "spark.blockManager.port": "7079",
        "spark.kubernetes.driver.pod.name": "$(POD_NAME)",
        "spark.driver.memory": job.driver.memory,
        **spark_conf(job, version),
    }
    command = ["cutover", "tag", "--version", version]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--", v.job, *job_args(job, version)]
    mounts, volumes = [], []
    if job.checkpoints is not None:
        mounts = [{"name": "checkpoints", "mountPath": job.checkpoints.mountPath}]
        volumes = [{"name": "checkpoints",
                    "persistentVolumeClaim": {"claimName": job.checkpoints.claimName}}]
    pod_labels = {**labels(job, version), "spark-role": "driver"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": job.namespace, "labels": pod_labels},
        "spec": {
            "replicas": 1,
            # Never two drivers of one version at once: they would share a checkpoint.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": job.serviceAccount,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 185,
                                        "fsGroup": 185},
                    "containers": [{
                        "name": "driver",
                        "image": v.image,
                        "args": command,
                        "env": [
                            {"name": "POD_NAME",
                             "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_IP",
                             "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        ],
                        "ports": [{"name": "driver", "containerPort": 7078},
                                  {"name": "blockmanager", "containerPort": 7079},
                                  {"name": "ui", "containerPort": 4040}],
                        # The JVM's heap and overhead, and the Python driver program beside it.
                        "resources": {
                            "requests": {"cpu": str(job.driver.cores),
                                         "memory": k8s_memory(job.driver.memory, 1.4)},
                            "limits": {"memory": k8s_memory(job.driver.memory, 1.4)},
                        },
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }


def operator_manifest(job: JobSpec, version: str) -> dict[str, Any]:
    """A SparkApplication (sparkoperator.k8s.io/v1beta2). The operator submits in cluster mode;
    the driver pod's Python program is tag_driver.py, that is `cutover tag` itself."""
    v = job.version(version)
    lab = labels(job, version)
    conf = spark_conf(job, version)
    # The operator sets these from the spec's own fields.
    for key in ("spark.kubernetes.namespace", "spark.kubernetes.container.image",
                "spark.kubernetes.authenticate.driver.serviceAccountName",
                "spark.executor.instances", "spark.executor.cores", "spark.executor.memory"):
        conf.pop(key)
    conf = {k: v for k, v in conf.items() if ".volumes." not in k and ".label." not in k}
    mounts, volumes = [], []
    if job.checkpoints is not None:
        mounts = [{"name": "checkpoints", "mountPath": job.checkpoints.mountPath}]
        volumes = [{"name": "checkpoints",
                    "persistentVolumeClaim": {"claimName": job.checkpoints.claimName}}]
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": object_name(job, version), "namespace": job.namespace,
                     "labels": lab},
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": v.image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": "local:///opt/cutover/tag_driver.py",
            "arguments": ["--version", version, "--", v.job, *job_args(job, version)],
            "sparkVersion": job.sparkVersion,
            "sparkConf": conf,
            # A streaming job runs until it is stopped: restart it after a failure (it resumes
            # from its checkpoint).
            "restartPolicy": {"type": "Always", "onFailureRetryInterval": 10,
                              "onSubmissionFailureRetryInterval": 20},
            "volumes": volumes,
            "driver": {"cores": job.driver.cores, "memory": job.driver.memory,
                       "serviceAccount": job.serviceAccount, "labels": lab,
                       "volumeMounts": mounts},
            "executor": {"instances": job.executor.instances, "cores": job.executor.cores,
                         "memory": job.executor.memory, "labels": lab,
                         "volumeMounts": mounts},
        },
    }


def k8s_memory(spark_memory: str, factor: float = 1.0) -> str:
    """Spark's 2g / 512m as Kubernetes' Mi, times ``factor`` (the JVM's overhead)."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    text = spark_memory.strip().lower().removesuffix("b")
    if not text or text[-1] not in units or not text[:-1].isdigit():
        raise JobError(f"memory {spark_memory!r} is not Spark's form (e.g. 512m, 2g)")
    return f"{int(int(text[:-1]) * units[text[-1]] * factor)}Mi"


def manifest(job: JobSpec, version: str) -> dict[str, Any]:
    return (client_manifest if job.mode == "client" else operator_manifest)(job, version)


class Kubectl:
    """kubectl, or in dry-run mode a printer of the commands it would run."""

    def __init__(self, binary: str, dry_run: bool) -> None:
        self.binary, self.dry_run = binary, dry_run

    def run(self, *args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        argv = [self.binary, *args]
        if self.dry_run:
            print(f"would run: {shlex.join(argv)}")
            return subprocess.CompletedProcess(argv, 0, "", "")
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  timeout=600)
        except FileNotFoundError:
            raise JobError(f"{self.binary} is not installed or not on PATH; install kubectl "
                           "or pass --kubectl PATH") from None
        if check and done.returncode != 0:
            raise JobError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")
        return done


def kind_of(job: JobSpec) -> str:
    return "deployment" if job.mode == "client" else "sparkapplication"


def start(job: JobSpec, version: str, kube: Kubectl, args: argparse.Namespace) -> int:
    doc = to_yaml(manifest(job, version))
    if kube.dry_run:
        print(doc, end="")
    kube.run("apply", "-f", "-", stdin=doc)
    ref = f"{kind_of(job)}/{object_name(job, version)}"
    if job.mode == "client":
        kube.run("rollout", "status", ref, "-n", job.namespace, f"--timeout={args.timeout}s")
    else:
        kube.run("wait", f"--for=jsonpath={{.status.applicationState.state}}={APP_RUNNING}",
                 ref, "-n", job.namespace, f"--timeout={args.timeout}s")
    print(f"{version}: driver running ({ref} in namespace {job.namespace})", flush=True)
    if kube.dry_run or args.no_watch:
        return 0
    return watch(job, version, kube, args.poll, args.down_for)


def driver_state(job: JobSpec, version: str, kube: Kubectl) -> str:
    """RUNNING, GONE, ENDED (the Spark application ended) or DOWN (not running now)."""
    ref = f"{kind_of(job)}/{object_name(job, version)}"
    path = ("{.status.availableReplicas}" if job.mode == "client"
            else "{.status.applicationState.state}")
    done = kube.run("get", ref, "-n", job.namespace, "-o", f"jsonpath={path}", check=False)
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return "GONE"
        return "DOWN"  # the API did not answer: not a reason to give up yet
    value = done.stdout.strip()
    if job.mode == "client":
        return "RUNNING" if value not in ("", "0") else "DOWN"
    if value == APP_RUNNING:
        return "RUNNING"
    return "ENDED" if value in APP_ENDED else "DOWN"


def watch(job: JobSpec, version: str, kube: Kubectl, poll: float, down_for: float) -> int:
    """Block while the driver runs; 1 when it is gone, ended, or down for ``down_for`` s."""
    down_since: float | None = None
    while True:
        state = driver_state(job, version, kube)
        now = time.monotonic()
        if state == "RUNNING":
            down_since = None
        elif state in ("GONE", "ENDED"):
            print(f"{version}: the driver is {state.lower()}", file=sys.stderr)
            return 1
        else:
            down_since = down_since if down_since is not None else now
            if now - down_since >= down_for:
                print(f"{version}: the driver has not been running for {down_for:.0f} s",
                      file=sys.stderr)
                return 1
        time.sleep(poll)


def stop(job: JobSpec, version: str, kube: Kubectl, args: argparse.Namespace) -> int:
    ref = f"{kind_of(job)}/{object_name(job, version)}"
    kube.run("delete", ref, "-n", job.namespace, "--ignore-not-found", "--wait=true",
             f"--timeout={args.timeout}s")
    if job.mode == "client":
        # The executors are owned by the driver pod; wait until they are gone too.
        kube.run("wait", "--for=delete", "pod", "-l",
                 f"cutover.io/version={version},app.kubernetes.io/name={job.name}",
                 "-n", job.namespace, f"--timeout={args.timeout}s", check=False)
    print(f"{version}: stopped ({ref} deleted)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job", default=str(Path(__file__).with_name("job.yaml")),
                   help="the job file (default: job.yaml beside this script)")
    p.add_argument("--kubectl", default="kubectl", help="the kubectl to run")
    p.add_argument("--dry-run", action="store_true",
                   help="print the kubectl commands and the manifest; run nothing")
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds to wait for the driver to start or to be deleted")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between driver checks")
    p.add_argument("--down-for", type=float, default=60.0,
                   help="seconds the driver may be down before start exits 1")
    p.add_argument("--no-watch", action="store_true",
                   help="start: return once the driver runs instead of watching it")
    p.add_argument("action", choices=("render", "start", "stop"))
    p.add_argument("version")
    args = p.parse_args(argv)
    try:
        job = load_job(Path(args.job))
        job.version(args.version)
        if args.action == "render":
            print(to_yaml(manifest(job, args.version)), end="")
            return 0
        kube = Kubectl(args.kubectl, args.dry_run)
        return (start if args.action == "start" else stop)(job, args.version, kube, args)
    except JobError as exc:
        print(f"spark_job {args.action} {args.version}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
