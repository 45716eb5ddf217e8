"""Rendering the Helm chart with the helm that `make helm` builds into the ignored cache."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "cutover-router"
CACHED_HELM = ROOT / ".cache" / "bin" / "helm"
KUBECHECK = ROOT / ".cache" / "bin" / "kubecheck"
# A helm built with `go install` assumes Kubernetes 1.20 (the release builds set the version at
# link time); the chart needs 1.25 or later.
KUBE_VERSION = "1.31.0"


def helm_binary() -> str:
    """The cached helm (make helm), else one on PATH; the tests skip without either."""
    if CACHED_HELM.is_file():
        return str(CACHED_HELM)
    found = shutil.which("helm")
    if found is None:
        pytest.skip("no helm: `make helm` builds it into .cache/bin (needs Go)")
    return found


def helm(*args: str, values: dict[str, Any] | None = None,
         tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [helm_binary(), *args]
    if args[0] in ("template", "lint"):
        argv += ["--kube-version", KUBE_VERSION]
    if values is not None:
        assert tmp is not None
        path = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["-f", str(path)]
    env = {**os.environ, "HELM_CACHE_HOME": str(ROOT / ".cache" / "helm"),
           "HELM_CONFIG_HOME": str(ROOT / ".cache" / "helm"),
           "HELM_DATA_HOME": str(ROOT / ".cache" / "helm")}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


class Rendered:
    """The chart's manifests as rendered by `helm template`, by kind and name."""

    def __init__(self, text: str) -> None:
        self.docs = [d for d in yaml.safe_load_all(text) if d]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, suffix: str = "") -> dict[str, Any]:
        found = [d for d in self.all(kind) if d["metadata"]["name"].endswith(suffix)]
        assert len(found) == 1, f"{len(found)} {kind} named *{suffix}"
        return found[0]


def render(tmp: Path, values: dict[str, Any] | None = None, release: str = "orders"
           ) -> Rendered:
    done = helm("template", release, str(CHART), "--namespace", "streaming",
                values=values, tmp=tmp)
    assert done.returncode == 0, done.stderr
    return Rendered(done.stdout)


def render_error(tmp: Path, values: dict[str, Any]) -> str:
    done = helm("template", "orders", str(CHART), values=values, tmp=tmp)
    assert done.returncode != 0, "the chart rendered values it must refuse"
    return done.stderr


def kubecheck(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Each document decoded strictly with Kubernetes' own types (tests/deploy/kubecheck, built
    by `make helm`): "KIND NAME" -> valid | invalid: reason | unknown (a custom resource)."""
    if not KUBECHECK.is_file():
        pytest.skip("no kubecheck: `make helm` builds it into .cache/bin (needs Go)")
    stream = "".join(f"---\n{yaml.safe_dump(d)}" for d in docs)
    done = subprocess.run([str(KUBECHECK)], input=stream, capture_output=True, text=True,
                          timeout=60)
    lines = done.stdout.splitlines()
    assert len(lines) == len(docs), done.stdout + done.stderr
    verdicts = {}
    for doc, line in zip(docs, lines, strict=True):
        verdict = line.split(" ", 1)[0]
        verdicts[f"{doc['kind']} {doc['metadata']['name']}"] = (
            line if verdict == "invalid" else verdict)
    return verdicts
