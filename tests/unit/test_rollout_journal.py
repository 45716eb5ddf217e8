"""The rollout journal's records on the status topic, who owns a rollout, its metrics, and the
Grafana dashboard that draws them."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from metrics_support import exported_families, series_names
from pydantic import ValidationError
from rollout_support import REF, T0, record

from cutover.cli import CliError
from cutover.cli.rollout import parse_fraction
from cutover.rollout.journal import (
    LEASE,
    CompareCounts,
    CompareSummary,
    Owner,
    Phase,
    PhaseSpan,
    journal_key,
    owner_alive,
    parse_record,
    route_of_key,
)
from cutover.rollout.metrics import prometheus
from cutover.status import parse_status

DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana" / "cutover-rollout.json"


def test_journal_keys_name_their_route_and_nothing_else_is_one() -> None:
    assert journal_key("orders") == b"rollout/orders"
    assert route_of_key(b"rollout/orders") == "orders"
    for key in (b"orders", None, b"rollout\xff", b"roll/orders"):
        assert route_of_key(key) is None
    assert route_of_key(b"rollout/\xff") is None


def test_a_record_round_trips_and_refuses_unknown_fields() -> None:
    rec = record(Phase.DRAINING, new_process=REF)
    assert parse_record(rec.to_json()) == rec
    data = json.loads(rec.to_json())
    data["surprise"] = 1
    with pytest.raises(ValidationError):
        parse_record(json.dumps(data).encode())
    with pytest.raises(ValidationError):
        parse_record(json.dumps({**json.loads(rec.to_json()), "phase": "NOPE"}).encode())


def test_status_readers_skip_a_journal_record() -> None:
    with pytest.raises(ValidationError):
        parse_status(record().to_json())


def test_an_owner_is_alive_by_its_process_here_and_by_its_lease_elsewhere() -> None:
    rec = record(Phase.DRAINING, owner=Owner(token="a", host="h1", pid=9), updated_at=T0)
    assert owner_alive(rec, T0 + timedelta(minutes=5), "h1", True)
    assert not owner_alive(rec, T0, "h1", False)
    assert owner_alive(rec, T0 + LEASE / 2, "h2", None)
    assert not owner_alive(rec, T0 + LEASE * 2, "h2", None)
    assert not owner_alive(rec.model_copy(update={"owner": None}), T0, "h1", True)
    assert not owner_alive(rec.model_copy(update={"phase": Phase.DONE}), T0, "h1", True)


@pytest.mark.parametrize(("text", "value"), [("0.1%", 0.001), ("5%", 0.05), ("0.02", 0.02),
                                             ("100%", 1.0), ("0", 0.0)])
def test_max_diff_takes_a_percentage_or_a_fraction(text: str, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["150%", "-1", "lots", "2"])
def test_a_max_diff_that_is_no_share_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(CliError, match=r"write e\.g\. 0\.1% or 0\.001"):
        parse_fraction(text)


def test_metrics_name_the_phase_its_time_and_the_comparison() -> None:
    spans = (PhaseSpan(phase=Phase.STARTING_NEW, started_at=T0,
                       ended_at=T0 + timedelta(seconds=2)),
             PhaseSpan(phase=Phase.CATCHING_UP, started_at=T0 + timedelta(seconds=2)))
    compare = CompareSummary(old="blue", new="green", partitions={0: CompareCounts(equal=9,
                                                                                  different=1)},
                             ranges={0: (1, 9)}, max_diff=0.5)
    rec = record(Phase.CATCHING_UP, phases=spans, compare=compare)
    text = prometheus(rec, T0 + timedelta(seconds=12))
    labels = 'route="r",from="blue",to="green"'
    assert f'cutover_rollout_phase{{{labels},phase="CATCHING_UP"}} 1' in text
    assert f'cutover_rollout_phase{{{labels},phase="DRAINING"}} 0' in text
    assert sum(1 for line in text.splitlines()
               if line.startswith("cutover_rollout_phase{") and line.endswith(" 1")) == 1
    assert f'cutover_rollout_phase_seconds{{{labels},phase="STARTING_NEW"}} 2.000' in text
    assert f'cutover_rollout_phase_seconds{{{labels},phase="CATCHING_UP"}} 10.000' in text
    assert f"cutover_rollout_seconds{{{labels}}} 12.000" in text
    assert f"cutover_rollout_deadline_seconds{{{labels}}} 888.000" in text
    assert f'cutover_rollout_compared_records{{{labels},result="different"}} 1' in text


def exported_names() -> set[str]:
    return series_names(exported_families())


def test_every_metric_the_dashboard_draws_is_exported() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(cutover_[a-z_]+)", e)}
    used |= set(re.findall(r"\b(cutover_[a-z_]+)", json.dumps(dash["templating"])))
    assert used and used <= exported_names(), used - exported_names()
    assert any(p["type"] == "state-timeline" and "cutover_rollout_phase" in p["targets"][0]["expr"]
               for p in dash["panels"])


def test_the_dashboard_draws_the_routers_health_by_current_names_on_a_grid() -> None:
    from router.base.metrics import METRICS

    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for wanted in ("cutover_dead_letters_total", "cutover_duplicates_total",
                   "cutover_pauses_total", "cutover_consumer_lag_records",
                   "cutover_added_latency_seconds_bucket", "cutover_worker_stalled",
                   "cutover_worker_rebuilds_total"):
        assert re.search(rf"\b{wanted}\b", exprs), f"the dashboard does not draw {wanted}"
    deprecated = {f"cutover_{n}" for n, (_, h) in METRICS.items() if h.startswith("deprecated")}
    assert deprecated and not {m for m in re.findall(r"\b(cutover_[a-z_]+)", exprs)} & deprecated
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells = [(x, y) for p in dash["panels"] for g in [p["gridPos"]]
             for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])]
    assert len(cells) == len(set(cells)), "two panels overlap"
    assert all(0 <= x < 24 for x, _ in cells)


def test_a_run_is_superseded_by_a_later_claim_or_another_owner_of_its_claim() -> None:
    from cutover.control.rollout_claim import superseded

    mine = record(Phase.DRAINING, claim=2, owner=Owner(token="me", host="h", pid=1))
    heartbeat = mine.model_copy(update={"note": "beat"})
    abort_request = mine.model_copy(update={"abort_requested": "ops"})
    assert superseded(mine, [heartbeat, abort_request]) is None
    earlier = mine.model_copy(update={"claim": 1, "owner": Owner(token="x", host="h", pid=2)})
    assert superseded(mine, [earlier]) is None
    rival = mine.model_copy(update={"owner": Owner(token="them", host="h2", pid=3)})
    assert superseded(mine, [heartbeat, rival]) == rival
    taker = mine.model_copy(update={"claim": 3, "owner": Owner(token="them", host="h", pid=4)})
    assert superseded(mine, [taker]) == taker
    let_go = mine.model_copy(update={"owner": None})
    assert superseded(mine, [let_go]) is None
