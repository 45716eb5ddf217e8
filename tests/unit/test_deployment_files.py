"""The docker/ deployment: compose validates, and its parts agree with each other.

`docker compose config` is the authority on the file's syntax where compose is installed; the
checks below run everywhere and catch what compose cannot know: that the router settings the
compose file mounts are valid, that the init service creates every topic the router and the
jobs use and publishes each route's first plan, that every service waits for it, and that
Prometheus and Grafana are provisioned with files that exist and point at the services.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from cutover.cli import build_parser
from cutover.settings import RouterSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
PROFILES = ["--profile", "green", "--profile", "tools"]
SERVICES = {"kafka", "init", "feed", "job-blue", "job-green", "router", "operator",
            "prometheus", "grafana"}


def compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) when present, else the standalone `docker-compose`."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture
def settings(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> RouterSettings:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    return load_settings(host_path(compose["services"]["router"], "/etc/cutover/router.yaml"))


def host_path(service: dict[str, Any], target: str) -> Path:
    """The host file a service mounts at ``target``."""
    for vol in service.get("volumes", []):
        source, _, rest = vol.partition(":")
        if rest.split(":")[0] == target:
            return (COMPOSE.parent / source).resolve()
    raise AssertionError(f"nothing is mounted at {target}")


def create_topics_module(compose: dict[str, Any]) -> ModuleType:
    path = host_path(compose["services"]["init"], "/opt/cutover-init/create_topics.py")
    spec = importlib.util.spec_from_file_location("create_topics", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def init_commands(compose: dict[str, Any]) -> list[list[str]]:
    """The init service's script as the command lines it runs (each side of a `||`)."""
    script = "\n".join(compose["services"]["init"]["command"]).replace("\\\n", " ")
    return [[w for w in shlex.split(part) if w not in (">/dev/null", "2>&1")]
            for line in script.splitlines() if line.strip() for part in line.split("||")]


def test_docker_compose_config_validates() -> None:
    cmd = compose_command()
    if cmd is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed "
                    "(apt-get install docker-compose-plugin, or docker-compose)")
    done = subprocess.run([*cmd, "-f", str(COMPOSE), *PROFILES, "config", "-q"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(cmd)} config rejected {COMPOSE}:\n{done.stderr}"
    services = subprocess.run([*cmd, "-f", str(COMPOSE), *PROFILES, "config", "--services"],
                              capture_output=True, text=True, cwd=ROOT, check=True)
    assert set(services.stdout.split()) == SERVICES


def test_compose_has_the_services_and_the_plain_up_starts_all_but_green_and_tools(
        compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    optional = {n for n, s in compose["services"].items() if s.get("profiles")}
    assert optional == {"job-green", "operator"}


def test_compose_builds_existing_dockerfiles(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build is not None:
            context = (COMPOSE.parent / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), f"{name}: no {build['dockerfile']}"


def test_every_mounted_host_file_exists_and_named_volumes_are_declared(
        compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if source.startswith((".", "/")):
                assert (COMPOSE.parent / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} mounts undeclared volume {source!r}"


def test_services_that_use_the_topics_wait_for_the_init_service(compose: dict[str, Any]) -> None:
    for name in ("feed", "job-blue", "job-green", "router"):
        needs = compose["services"][name]["depends_on"]
        assert needs["init"] == {"condition": "service_completed_successfully"}, name
    assert compose["services"]["init"]["depends_on"]["kafka"] == {"condition": "service_healthy"}


def test_the_init_service_creates_every_topic_compacted_where_the_router_needs_it(
        compose: dict[str, Any], settings: RouterSettings) -> None:
    create, *_ = init_commands(compose)
    assert create[:2] == ["python", "/opt/cutover-init/create_topics.py"]
    also = tuple(create[i + 1] for i, w in enumerate(create) if w == "--also")
    partitions = int(create[create.index("--partitions") + 1])
    topics = create_topics_module(compose).wanted(
        str(host_path(compose["services"]["init"], "/etc/cutover/router.yaml")),
        partitions, also)
    for route in settings.routes:
        for topic in [*route.inputs, route.output, route.dead_letter]:
            assert topics[str(topic)] == (partitions, {}), f"route {route.name}: {topic}"
    for compacted in (settings.control_topic, settings.status_topic, settings.checkpoint_topic):
        assert topics[str(compacted)] == (1, {"cleanup.policy": "compact"})
    for job in ("job-blue", "job-green"):
        cmd = compose["services"][job]["command"]
        for flag in ("--input", "--output"):
            assert cmd[cmd.index(flag) + 1] in topics, f"{job}: {flag} topic is not created"
    feed = " ".join(compose["services"]["feed"]["command"])
    assert "--topic orders" in feed and "orders" in topics


def test_the_init_service_publishes_each_routes_first_plan_once(
        compose: dict[str, Any], settings: RouterSettings) -> None:
    _, show, init = init_commands(compose)
    assert show[:3] == ["cutover", "plan", "show"] and init[:3] == ["cutover", "plan", "init"]
    parsed_show = build_parser("plan").parse_args(show[1:])
    parsed_init = build_parser("plan").parse_args(init[1:])
    assert parsed_show.route == parsed_init.route == settings.routes[0].name
    assert parsed_init.primary == "blue"
    blue = compose["services"]["job-blue"]["command"]
    assert blue[blue.index("--version") + 1] == parsed_init.primary


def test_job_services_run_example_jobs_under_the_tagger(compose: dict[str, Any]) -> None:
    for name, version in (("job-blue", "blue"), ("job-green", "green")):
        cmd = compose["services"][name]["command"]
        assert cmd[:2] == ["cutover", "tag"]
        parsed = build_parser("tag").parse_args(cmd[1:])
        assert parsed.version == version
        assert parsed.job.startswith("/jobs/"), f"{name}: {parsed.job} is not under /jobs"
        assert (ROOT / "examples" / "jobs" / parsed.job.removeprefix("/jobs/")).is_file()


def test_the_router_service_runs_the_mounted_settings_with_an_instance_id(
        compose: dict[str, Any], settings: RouterSettings) -> None:
    router = compose["services"]["router"]
    parsed = build_parser("router").parse_args(router["command"])
    assert parsed.config == "/etc/cutover/router.yaml" and parsed.instance_id
    assert settings.bootstrap == "kafka:9092"
    assert f"{settings.http_port}:{settings.http_port}" in router["ports"]


def test_prometheus_scrapes_the_router_and_loads_the_charts_alert_rules(
        compose: dict[str, Any], settings: RouterSettings) -> None:
    prom = compose["services"]["prometheus"]
    config = yaml.safe_load(host_path(prom, "/etc/prometheus/prometheus.yml").read_text())
    (rule_file,) = config["rule_files"]
    rules = host_path(prom, rule_file)
    assert rules == ROOT / "deploy" / "helm" / "cutover-router" / "files" / "alerts.yaml"
    assert yaml.safe_load(rules.read_text())["groups"]
    targets = {c["job_name"]: c["static_configs"][0]["targets"]
               for c in config["scrape_configs"]}
    assert targets["cutover-router"] == [f"router:{settings.http_port}"]
    host, _, _ = targets["cutover-rollout"][0].partition(":")
    assert f"{host}:host-gateway" in prom["extra_hosts"]


def test_grafana_is_provisioned_with_prometheus_and_the_dashboards(
        compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning")
    (source,) = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["isDefault"]
    assert "9090:9090" in compose["services"]["prometheus"]["ports"]
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards" / "cutover.yaml").read_text())["providers"]
    dashboards = host_path(grafana, provider["options"]["path"])
    found = sorted(dashboards.glob("*.json"))
    assert found, "no dashboard where the provider looks"
    for path in found:
        assert json.loads(path.read_text())["uid"]
