"""The Makefile's fetch rules clean and write only inside the JVM cache they are given: a
relative JVM_CACHE (the default) under the checkout, an absolute one (a cache shared between
checkouts) where it points. Read from `make -n` (nothing runs)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dry_run(target: str, *assignments: str) -> str:
    """What `make` would run for ``target``, its stamps forced out of date."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-B", "-C", str(REPO), target, *assignments],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def touched_paths(commands: str) -> list[str]:
    """The folders the fetch removes, writes and keeps its Maven repository in."""
    return (re.findall(r"rm -rf ((?:\S+ ?)+)", commands)[0].split()
            + re.findall(r"-DoutputDirectory=(\S+)", commands)
            + re.findall(r"-Dmaven\.repo\.local=(\S+)", commands))


@pytest.mark.parametrize("cache", [None, "/tmp/shared-jvm-cache"])
@pytest.mark.parametrize("target", [".cache/jvm/.fetched-stamp", "jvm"])
def test_the_fetch_stays_inside_its_cache(cache: str | None, target: str) -> None:
    assignments = () if cache is None else (f"JVM_CACHE={cache}",)
    if cache is not None and target.startswith(".cache"):
        target = f"{cache}/.fetched-stamp"
    root = Path(cache) if cache is not None else REPO / ".cache" / "jvm"
    paths = touched_paths(dry_run(target, *assignments))
    assert paths, "the fetch rule no longer removes, writes or caches anything"
    for path in paths:
        assert Path(path).is_absolute() and Path(path).is_relative_to(root), path
