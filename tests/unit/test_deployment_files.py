"""The docker/ deployment: compose validates, and its parts agree with each other.

`docker compose config` is the authority on the file's syntax; the checks below it catch what
compose cannot know: that the router settings the compose file mounts are valid, that every
topic the router needs is created by the init service, and that the job images run real files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cutover.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
PROFILES = ["--profile", "green", "--profile", "tools"]


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
    assert set(services.stdout.split()) == {"kafka", "topics", "job-blue", "job-green",
                                            "router", "operator"}


def test_compose_builds_existing_dockerfiles(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build is None:
            continue
        context = (COMPOSE.parent / build["context"]).resolve()
        assert (context / build["dockerfile"]).is_file(), f"{name}: no {build['dockerfile']}"
        for line in (context / build["dockerfile"]).read_text().splitlines():
            if line.startswith("COPY "):
                for src in line.split()[1:-1]:
                    assert (context / src).exists(), f"{build['dockerfile']}: COPY {src} missing"


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} mounts undeclared volume {source!r}"


def created_topics(compose: dict[str, Any]) -> dict[str, str]:
    """Topic -> the init service's command line that creates it."""
    script = "\n".join(compose["services"]["topics"]["command"]).replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in script.splitlines():
        loop = re.match(r"\s*for topic in (.+); do", line)
        if loop:
            pending = loop.group(1).split()
            continue
        m = re.search(r"--topic (\S+)", line)
        if m and m.group(1) == "$$topic":
            found.update({t: line for t in pending})
        elif m:
            found[m.group(1)] = line
    return found


def test_router_settings_mounted_by_compose_are_valid(compose: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    mount = next(v for v in compose["services"]["router"]["volumes"] if "router.yaml" in v)
    settings = load_settings(COMPOSE.parent / mount.split(":")[0])
    topics = created_topics(compose)
    for route in settings.routes:
        for topic in [*route.inputs, route.output, route.dead_letter]:
            assert topic in topics, f"route {route.name}: topic {topic!r} is never created"
    for compacted in (settings.control_topic, settings.status_topic, settings.checkpoint_topic):
        assert "cleanup.policy=compact" in topics.get(compacted, ""), \
            f"{compacted} must be created compacted"
    assert settings.bootstrap == "kafka:9092"


def test_job_services_run_example_jobs(compose: dict[str, Any]) -> None:
    topics = created_topics(compose)
    for name in ("job-blue", "job-green"):
        cmd = compose["services"][name]["command"]
        job = cmd[cmd.index("--") + 1]
        assert job.startswith("/jobs/"), f"{name}: {job} is not under /jobs"
        assert (ROOT / "examples" / "jobs" / job.removeprefix("/jobs/")).is_file()
        for flag in ("--input", "--output"):
            assert cmd[cmd.index(flag) + 1] in topics, f"{name}: {flag} topic not created"
