"""The Helm chart deploy/helm/cutover-router: it lints, renders, and what it renders holds the
deployment's invariants (the pod name as instance id, probes on the worker's endpoints, no
root, secrets only as mounted files, settings the router accepts, scraping and alert rules on
metrics the router serves). Rendered only: nothing here talks to a Kubernetes cluster.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cutover.cli import build_parser
from cutover.secret_refs import REFERENCE, SECRET_SETTINGS
from cutover.settings import RouterSettings, parse_settings
from tests.deploy.chart import CHART, ROOT, Rendered, helm, kubecheck, render, render_error

pytestmark = pytest.mark.deploy

SECURED: dict[str, Any] = {
    "kafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "cutover-router"},
    "secrets": {"sasl.password": {"secretName": "cutover-router-kafka", "key": "password"},
                "ssl.key.password": {"secretName": "cutover-router-tls-pass", "key": "pass"}},
    "tls": {"caSecret": "kafka-ca", "clientSecret": "cutover-router-client"},
    "planSigning": {"secretName": "cutover-plan-key"},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chart")


@pytest.fixture(scope="module")
def plain(tmp: Path) -> Rendered:
    return render(tmp)


@pytest.fixture(scope="module")
def secured(tmp: Path) -> Rendered:
    return render(tmp, SECURED)


def router_container(r: Rendered) -> dict[str, Any]:
    pod = r.one("StatefulSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return container


def settings_of(r: Rendered, suffix: str = "cutover-router") -> RouterSettings:
    data = yaml.safe_load(r.one("ConfigMap", suffix)["data"]["router.yaml"])
    return parse_settings(data, "rendered router.yaml")


def test_helm_lint_passes_with_the_default_and_the_secured_values(tmp: Path) -> None:
    for values in (None, SECURED):
        done = helm("lint", "--strict", str(CHART), values=values, tmp=tmp)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_manifest_decodes_strictly_as_its_kubernetes_type(
        plain: Rendered, secured: Rendered) -> None:
    for r in (plain, secured):
        verdicts = kubecheck(r.docs)
        custom = {k for k, v in verdicts.items() if v == "unknown"}
        assert custom == {k for k in verdicts
                          if k.split()[0] in ("ServiceMonitor", "PrometheusRule")}
        assert all(v in ("valid", "unknown") for v in verdicts.values()), verdicts


def test_the_strict_decoding_refuses_a_misspelled_field(plain: Rendered) -> None:
    sts = plain.one("StatefulSet")
    broken = {**sts, "spec": {**sts["spec"], "podManagmentPolicy": "Parallel"}}
    (verdict,) = kubecheck([broken]).values()
    assert verdict.startswith("invalid") and "podManagmentPolicy" in verdict


def test_each_worker_uses_its_pod_name_as_instance_id(plain: Rendered) -> None:
    sts = plain.one("StatefulSet")
    c = router_container(plain)
    assert c["args"][c["args"].index("--instance-id") + 1] == "$(POD_NAME)"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The instance id the CLI accepts: pod names of this StatefulSet are <name>-<ordinal>.
    parsed = build_parser("router").parse_args(
        [a.replace("$(POD_NAME)", f"{sts['metadata']['name']}-0") for a in c["args"]])
    assert parsed.instance_id == "orders-cutover-router-0"
    assert parsed.config == "/etc/cutover/config/router.yaml"
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/cutover/config")
    assert mount["name"] == "settings"


def test_probes_ask_the_workers_own_endpoints_on_its_port(plain: Rendered) -> None:
    c = router_container(plain)
    settings = settings_of(plain)
    (port,) = c["ports"]
    assert port["containerPort"] == settings.http_port == 6066
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    # /health turns 503 while the worker's watchdog reports it stalled (router.worker.watchdog)
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert port["name"] == "http"


def test_the_rendered_settings_are_accepted_by_the_router(plain: Rendered) -> None:
    s = settings_of(plain)
    assert [r.name for r in s.routes] == ["totals"]
    assert str(s.state_dir).startswith("/var/lib/cutover/")
    state = next(m for m in router_container(plain)["volumeMounts"] if m["name"] == "state")
    assert state["mountPath"] == "/var/lib/cutover"
    claim = plain.one("StatefulSet")["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "state"


def test_without_persistence_the_state_is_an_empty_dir(tmp: Path) -> None:
    r = render(tmp, {"persistence": {"enabled": False}})
    sts = r.one("StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}


def test_no_container_runs_as_root_or_can_gain_privileges(secured: Rendered) -> None:
    for kind in ("StatefulSet", "Job"):
        pod = secured.one(kind)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"]
        assert pod["automountServiceAccountToken"] is False


def mounted_secret_files(pod: dict[str, Any]) -> dict[str, str]:
    """Mount path prefix -> the Secret mounted there."""
    (c,) = pod["containers"]
    secret_volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"]
                      if "secret" in v}
    return {m["mountPath"]: secret_volumes[m["name"]] for m in c["volumeMounts"]
            if m["name"] in secret_volumes}


def test_secrets_are_files_from_mounted_secrets_never_values(secured: Rendered) -> None:
    assert secured.all("Secret") == [], "the chart must not carry secrets"
    kafka = settings_of(secured).kafka
    pod = secured.one("StatefulSet")["spec"]["template"]["spec"]
    mounts = mounted_secret_files(pod)
    for setting, ref in SECURED["secrets"].items():
        m = REFERENCE.match(str(kafka[setting]))
        assert m is not None and m.group("kind") == "file", f"{setting}: {kafka[setting]}"
        path = Path(m.group("target"))
        assert mounts.get(str(path.parent)) == ref["secretName"]
        assert path.name == ref["key"]
    for setting, value in kafka.items():
        if setting in SECRET_SETTINGS:
            assert REFERENCE.match(str(value)), f"{setting} is not a reference"
    assert mounts["/etc/cutover/tls/ca"] == "kafka-ca"
    assert kafka["ssl.ca.location"] == "/etc/cutover/tls/ca/ca.crt"
    assert kafka["ssl.key.location"].startswith("/etc/cutover/tls/client/")
    env = {e["name"]: e.get("value") for e in router_container(secured)["env"]}
    key_file = Path(env["CUTOVER_PLAN_KEY_FILE"])
    assert mounts[str(key_file.parent)] == "cutover-plan-key"


@pytest.mark.parametrize("setting", sorted(SECRET_SETTINGS))
def test_a_secret_written_in_the_values_stops_the_rendering(tmp: Path, setting: str) -> None:
    err = render_error(tmp, {"kafka": {setting: "hunter2"}})
    assert f"kafka.{setting} holds a secret" in err
    assert "secrets:" in err


def test_settings_the_chart_owns_cannot_be_set_in_settings(tmp: Path) -> None:
    values = {"settings": {"bootstrap": "k:9092", "state_dir": "/tmp/x",
                           "routes": [{"name": "r", "inputs": ["a"], "output": "b"}]}}
    assert "settings.state_dir is set by the chart" in render_error(tmp, values)


def test_a_typo_in_the_values_is_refused_by_the_schema(tmp: Path) -> None:
    err = render_error(tmp, {"replica": 2})
    assert "replica" in err


def test_a_changed_settings_file_rolls_the_workers(tmp: Path, plain: Rendered) -> None:
    other = render(tmp, {"settings": {"bootstrap": "other:9092",
                                      "routes": [{"name": "totals", "inputs": ["a"],
                                                  "output": "b"}]}})

    def checksum(r: Rendered) -> str:
        meta = r.one("StatefulSet")["spec"]["template"]["metadata"]
        return str(meta["annotations"]["checksum/settings"])

    assert checksum(plain) != checksum(other)


def test_disruptions_take_at_most_one_worker_and_workers_spread(plain: Rendered) -> None:
    pdb = plain.one("PodDisruptionBudget")
    sts = plain.one("StatefulSet")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"]


def test_resources_request_memory_and_cpu_and_limit_memory(plain: Rendered) -> None:
    res = router_container(plain)["resources"]
    assert set(res["requests"]) == {"cpu", "memory"}
    assert "memory" in res["limits"] and "cpu" not in res["limits"]


def test_the_service_monitor_scrapes_metrics_of_every_worker(secured: Rendered) -> None:
    sm = secured.one("ServiceMonitor")
    wanted = sm["spec"]["selector"]["matchLabels"]
    services = [s for s in secured.all("Service")
                if wanted.items() <= s["metadata"]["labels"].items()]
    assert len(services) == 1, "the ServiceMonitor must select exactly one Service"
    (svc,) = services
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert secured.one("StatefulSet")["spec"]["serviceName"] == svc["metadata"]["name"]
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}


def metric_names_served() -> set[str]:
    """Names of the metrics the router worker and the rollout serve (their declarations)."""
    from cutover.rollout.metrics import METRICS
    from router.base.metrics import METRICS as ROUTER_METRICS

    return {f"cutover_{n}" for n in (*ROUTER_METRICS, *METRICS)}


def test_alert_rules_use_only_metrics_that_are_served(secured: Rendered) -> None:
    rule = secured.one("PrometheusRule")
    served = metric_names_served()
    assert "cutover_transition_state" in served and "cutover_rollout_phase" in served
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {"CutoverTransitionStalled", "CutoverPartitionsPaused", "CutoverWorkerDown"} <= {
        a["alert"] for a in alerts}
    for a in alerts:
        used = set(re.findall(r"\bcutover_[a-z_]+", a["expr"]))
        assert used <= served, f"{a['alert']} uses {used - served}, which nothing serves"
        assert a["labels"]["severity"] in {"warning", "critical"}
        assert a["annotations"]["summary"]


def promcheck(path: Path) -> subprocess.CompletedProcess[str]:
    binary = ROOT / ".cache" / "bin" / "promcheck"
    if not binary.is_file():
        pytest.skip("no promcheck: `make helm` builds it into .cache/bin (needs Go)")
    return subprocess.run([str(binary), str(path)], capture_output=True, text=True, timeout=60)


def test_the_alert_rules_load_in_prometheus(secured: Rendered, tmp: Path) -> None:
    rules = CHART / "files" / "alerts.yaml"
    done = promcheck(rules)
    assert done.returncode == 0, done.stdout
    rendered = tmp / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(secured.one("PrometheusRule")["spec"]))
    n = sum(len(g["rules"]) for g in yaml.safe_load(rules.read_text())["groups"])
    assert promcheck(rendered).stdout.strip() == f"ok {rendered}: {n} rules"
    broken = tmp / "broken-rules.yaml"
    broken.write_text(rules.read_text().replace("== 1", "== (1", 1))
    assert promcheck(broken).returncode == 1


def test_prometheus_operator_resources_are_off_by_default(plain: Rendered) -> None:
    assert plain.all("ServiceMonitor") == [] and plain.all("PrometheusRule") == []


def init_script(r: Rendered) -> list[list[str]]:
    """The init Job's shell script, as the command lines it runs."""
    (c,) = r.one("Job")["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["/bin/sh", "-ec"]
    script = c["args"][0].replace("\\\n", " ")
    return [shlex.split(part) for line in script.splitlines() if line.strip()
            for part in line.split("||")]


def test_the_init_job_runs_cutover_init_for_each_route(plain: Rendered) -> None:
    job = plain.one("Job")
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert hooks == ["pre-install", "pre-upgrade"]
    cm = plain.one("ConfigMap", "-init")
    assert cm["metadata"]["annotations"]["helm.sh/hook-weight"] < \
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    (init,) = init_script(plain)
    assert init[:2] == ["cutover", "init"]
    parsed = build_parser("init").parse_args(init[1:])
    assert parsed.route == "totals" and parsed.primary == "blue"
    assert parsed.config == "/etc/cutover/init/router.yaml"
    assert parsed.partitions == 4 and parsed.replication_factor == -1
    assert yaml.safe_load(cm["data"]["router.yaml"]) == \
        yaml.safe_load(plain.one("ConfigMap", "cutover-router")["data"]["router.yaml"])


def test_each_route_gets_the_first_primary_unless_named_otherwise(tmp: Path) -> None:
    routes = [{"name": n, "inputs": [f"{n}.raw"], "output": n} for n in ("a", "b")]
    r = render(tmp, {"settings": {"bootstrap": "k:9092", "routes": routes},
                     "init": {"firstPrimary": "v1", "firstPrimaryOf": {"b": "v7"}}})
    inits = [argv for argv in init_script(r) if argv[:2] == ["cutover", "init"]]
    firsts = {argv[argv.index("--route") + 1]: argv[argv.index("--primary") + 1]
              for argv in inits}
    assert firsts == {"a": "v1", "b": "v7"}


def test_a_first_primary_for_an_unknown_route_stops_the_rendering(tmp: Path) -> None:
    err = render_error(tmp, {"init": {"firstPrimaryOf": {"orders": "blue"}}})
    assert "init.firstPrimaryOf names route orders" in err
