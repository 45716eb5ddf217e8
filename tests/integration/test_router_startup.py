"""Router start-up failures an operator meets: no broker, missing topics."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from testground.brokers import free_port
from tests.children import VENV_BIN


def _run(config: Path, seconds: float) -> tuple[int | None, str]:
    proc = subprocess.Popen([str(VENV_BIN / "cutover"), "router", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=seconds)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        return None, out.decode(errors="replace")


def test_unreachable_broker_retries_with_a_clear_message(tmp_path: Path) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "bootstrap": f"127.0.0.1:{free_port()}", "http_port": None,
        "state_dir": str(tmp_path / "state"),
        "routes": [{"name": "orders", "inputs": ["orders.raw"], "output": "orders"}]}))
    code, out = _run(cfg, 12)
    assert code is None, f"the router gave up instead of retrying:\n{out}"
    assert out.count("cannot reach Kafka at 127.0.0.1:") >= 2
    assert "retrying in" in out and "Traceback" not in out
    # Its web server runs, but it is not ready (tests/integration/test_router_ready.py)
    assert not re.search(r"\bready\b", out, re.I), out


@pytest.mark.broker
def test_missing_output_topic_is_named(bootstrap: str, tmp_path: Path,
                                       topic_factory: object) -> None:
    raw = topic_factory("raw", 2)
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "http_port": None, "state_dir": str(tmp_path / "state"),
        "control_topic": topic_factory("ctl", 1), "status_topic": topic_factory("st", 1),
        "routes": [{"name": "orders", "inputs": [raw], "output": f"missing-{raw}"}]}))
    code, out = _run(cfg, 60)
    assert code == 2, out
    assert f"output topic 'missing-{raw}' does not exist" in out
    assert "Traceback" not in out
