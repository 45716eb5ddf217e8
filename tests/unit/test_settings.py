from __future__ import annotations

from pathlib import Path

import pytest

from cutover.plan import parse_plan
from cutover.settings import Handover, SettingsError, load_settings
from cutover.status import TransitionState, parse_status
from router.worker.datapath import DataPath

CONFIG = Path(__file__).parents[2] / "config"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "router.yaml"
    p.write_text(text)
    return p


def test_example_files_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    s = load_settings(CONFIG / "router.yaml")
    assert s.routes[0].name == "orders" and s.routes[0].handover is Handover.ORDERED
    s2 = load_settings(CONFIG / "router-per-version-topics.yaml")
    assert s2.routes[0].dedup.identity == ("account_id", "window.end")
    assert s2.kafka["security.protocol"] == "SASL_SSL"
    assert s2.routes[0].dead_letter == "fraud-scores.dlq"
    assert parse_plan((CONFIG / "plan-switch.json").read_bytes()).transition == (
        "blue", "green", 1767225600000)
    assert parse_plan((CONFIG / "plan-initial.json").read_bytes()).epoch == 1
    st = parse_status((CONFIG / "status-example.json").read_bytes())
    assert st.transition.state is TransitionState.PENDING


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    s = load_settings(write(tmp_path, "bootstrap: k:9092\nroutes:\n"
                                      "  - {name: r, inputs: [r.raw], output: r.out}\n"))
    r = s.routes[0]
    assert (s.control_topic, s.status_topic) == ("bg.control", "bg.status")
    assert r.dead_letter == "r.out.dlq" and r.dedup.identity == "record"
    assert r.handover is Handover.ORDERED and r.dedup.retention_ms == 3_600_000


def test_env_overrides_bootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTOVER_BOOTSTRAP", "other:1234")
    s = load_settings(write(tmp_path, "routes:\n  - {name: r, inputs: [a], output: b}\n"))
    assert s.bootstrap == "other:1234"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bootstrap: k\nroutes:\n  - {name: r, inputs: [a], output: b, dedupe: {}}\n",
         "unknown key 'routes[0].dedupe'"),
        ("bootstrap: k\nstatus_topik: x\nroutes:\n  - {name: r, inputs: [a], output: b}\n",
         "unknown key 'status_topik'"),
        ("routes:\n  - {name: r, inputs: [a], output: b}\n", "missing required key 'bootstrap'"),
        ("bootstrap: k\nroutes:\n  - {name: r, output: b}\n",
         "missing required key 'routes[0].inputs'"),
        ("bootstrap: k\nroutes:\n  - {name: r, inputs: [a], output: a}\n",
         "both an input and an output"),
        ("bootstrap: k\nroutes:\n  - {name: r, inputs: [a], output: b, handover: fast}\n",
         "routes[0].handover"),
        ("bootstrap: k\nroutes:\n  - {name: r, inputs: [a], output: b}\n"
         "  - {name: r, inputs: [c], output: d}\n", "used twice"),
        ("bootstrap: k\nroutes: [\n", "not valid YAML"),
        ("- just a list\n", "expected a mapping"),
    ],
)
def test_bad_settings_name_key_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        text: str, message: str) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(tmp_path / "nope.yaml")


def test_checkpoint_topic_default_and_override(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    route = "routes:\n  - {name: r, inputs: [r.raw], output: r.out}\n"
    s = load_settings(write(tmp_path, "bootstrap: k\n" + route))
    assert s.checkpoint_topic == "cutover-router.checkpoints"
    s = load_settings(write(tmp_path, "bootstrap: k\ngroup_id: g7\n" + route))
    assert s.checkpoint_topic == "g7.checkpoints"
    s = load_settings(write(tmp_path, "bootstrap: k\ngroup_id: g7\n"
                                      "checkpoint_topic: ops.ckpt\n" + route))
    assert s.checkpoint_topic == "ops.ckpt"
    assert DataPath(s).ckpt_topic == "ops.ckpt"


@pytest.mark.parametrize(("value", "message"), [
    ("r.out", "checkpoint_topic 'r.out' is also used"),
    ("bg.status", "checkpoint_topic 'bg.status' is also used"),
    ("bad name!", "checkpoint_topic"),
])
def test_checkpoint_topic_must_be_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          value: str, message: str) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    path = write(tmp_path, f"bootstrap: k\ncheckpoint_topic: '{value}'\n"
                           "routes:\n  - {name: r, inputs: [r.raw], output: r.out}\n")
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert message in str(err.value)


def test_dedup_memory_and_poison_tolerance_defaults(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    s = load_settings(write(tmp_path, "bootstrap: k:9092\nroutes:\n"
                                      "  - {name: r, inputs: [r.raw], output: r.out}\n"
                                      "  - {name: s, inputs: [s.raw], output: s.out,\n"
                                      "     dedup: {retention_ms: 60000, filter_bytes: 4096}}\n"))
    r, short = s.routes
    assert (r.dedup.filter_bytes, r.dedup.write_buffer_bytes) == (16 << 20, 8 << 20)
    assert (s.store_memory.block_cache_bytes, s.store_memory.write_buffer_bytes,
            s.store_memory.filter_bytes) == (64 << 20, 64 << 20, 128 << 20)
    assert r.future_tolerance_ms == 600_000       # 10 minutes
    assert short.future_tolerance_ms == 30_000    # half a retention shorter than 20 minutes
    assert short.dedup.filter_bytes == 4096


def test_the_block_cache_is_set_per_worker_not_per_route(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A settings file from before the worker-wide store memory is refused with the fix."""
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    with pytest.raises(SettingsError, match=r"store_memory\.block_cache_bytes"):
        load_settings(write(tmp_path, "bootstrap: k:9092\nroutes:\n"
                                      "  - {name: r, inputs: [r.raw], output: r.out,\n"
                                      "     dedup: {block_cache_bytes: 8388608}}\n"))


def test_poison_tolerance_must_stay_below_the_retention(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    path = write(tmp_path, "bootstrap: k:9092\nroutes:\n"
                           "  - {name: r, inputs: [r.raw], output: r.out,\n"
                           "     future_tolerance_ms: 3600000, dedup: {retention_ms: 3600000}}\n")
    with pytest.raises(SettingsError, match=r"future_tolerance_ms \(3600000\) must be below "
                                            r"dedup.retention_ms .*raise retention_ms"):
        load_settings(path)
    with pytest.raises(SettingsError, match="filter_bytes"):
        load_settings(write(tmp_path, "bootstrap: k:9092\nroutes:\n"
                                      "  - {name: r, inputs: [r.raw], output: r.out,\n"
                                      "     dedup: {filter_bytes: 8}}\n"))
