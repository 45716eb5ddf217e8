"""The alert rules (deploy/helm/cutover-router/files/alerts.yaml, the one file both the chart's
PrometheusRule and the compose deployment's Prometheus load): rules Prometheus can load, each on
metrics the router or the rollout exports, with the label values those metrics carry."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from metrics_support import exported_families, series_names

from cutover.rollout.journal import Phase
from cutover.status import TransitionState
from router.base.metrics import METRICS as ROUTER_METRICS

RULES = (Path(__file__).resolve().parents[2] / "deploy" / "helm" / "cutover-router" / "files"
         / "alerts.yaml")
EXPORTED = series_names(exported_families())
WANTED = {"CutoverTransitionStalled", "CutoverPartitionsPaused", "CutoverWorkerDown",
          "CutoverWorkerStatusStale", "CutoverWorkerStalled", "CutoverWorkerRebuilding",
          "CutoverConsumerLagGrowing", "CutoverDeadLetters", "CutoverRolloutFailed"}


def _rules() -> list[dict[str, object]]:
    data = yaml.safe_load(RULES.read_text())
    return [r for g in data["groups"] for r in g["rules"]]


def test_the_rules_cover_stalls_pauses_stuck_workers_lag_dead_letters_and_failed_rollouts(
) -> None:
    names = [str(r["alert"]) for r in _rules()]
    assert len(names) == len(set(names))
    assert set(names) >= WANTED, WANTED - set(names)


def test_every_rule_has_an_expression_a_severity_and_a_summary() -> None:
    for r in _rules():
        assert isinstance(r["expr"], str) and r["expr"].strip(), r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]  # type: ignore[index]
        assert r["annotations"]["summary"], r["alert"]  # type: ignore[index]
        if "for" in r:
            assert re.fullmatch(r"\d+[smh]", str(r["for"])), r["alert"]


def test_every_metric_a_rule_uses_is_exported_with_the_label_values_it_names() -> None:
    states = {s.value for s in TransitionState}
    phases = {p.value for p in Phase}
    for r in _rules():
        expr = str(r["expr"])
        for name in re.findall(r"\b(cutover_[a-z_]+)", expr):
            assert name in EXPORTED, f"{r['alert']}: {name} is not exported"
            assert "deprecated" not in dict(
                (f"cutover_{n}", h) for n, (_, h) in ROUTER_METRICS.items()).get(name, ""), name
        for state in re.findall(r'state="([A-Z_]+)"', expr):
            assert state in states, f"{r['alert']}: no transition state {state}"
        for phase in re.findall(r'phase=~?"([A-Z_|]+)"', expr):
            assert set(phase.split("|")) <= phases, f"{r['alert']}: no rollout phase {phase}"
        assert expr.count("(") == expr.count(")"), r["alert"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_loads_the_rules() -> None:
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
