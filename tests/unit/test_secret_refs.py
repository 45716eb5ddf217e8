"""Secrets come from files or environment variables, never in clear, and no error repeats one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cutover.cli import main as cutover_main
from cutover.secret_refs import SecretError, plan_signing_key, resolve_secrets
from router.base.kafka_io import base_conf

SECRET = "s3cret-Value-42"


def test_references_resolve_from_a_file_and_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "pw"
    f.write_text(SECRET + "\n")
    monkeypatch.setenv("ROUTER_PW", SECRET)
    got = resolve_secrets({"sasl.username": "router", "sasl.password": f"${{file:{f}}}",
                           "ssl.key.password": "${env:ROUTER_PW}", "linger.ms": 5})
    assert got == {"sasl.username": "router", "sasl.password": SECRET,
                   "ssl.key.password": SECRET, "linger.ms": 5}
    conf = base_conf("k:9092", {"sasl.password": "${env:ROUTER_PW}"})
    assert conf["sasl.password"] == SECRET


def test_a_secret_in_clear_is_refused_with_how_to_write_it() -> None:
    with pytest.raises(SecretError) as exc:
        resolve_secrets({"sasl.password": SECRET})
    assert str(exc.value) == (
        "kafka setting 'sasl.password' holds a secret in clear; keep it in a file or an "
        "environment variable and write sasl.password: ${file:/path/to/secret} or "
        "sasl.password: ${env:NAME}")
    assert SECRET not in str(exc.value)


def test_an_unresolvable_reference_names_the_setting_and_the_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_PW", raising=False)
    with pytest.raises(SecretError, match=re.escape("'sasl.password' refers to environment "
                                                    "variable NO_SUCH_PW, which is not set")):
        resolve_secrets({"sasl.password": "${env:NO_SUCH_PW}"})
    missing = tmp_path / "absent"
    with pytest.raises(SecretError, match=re.escape(f"refers to file {missing}, which cannot")):
        resolve_secrets({"sasl.password": f"${{file:{missing}}}"})


def test_a_command_with_a_secret_in_clear_exits_2_with_the_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_BOOTSTRAP", raising=False)
    cfg = tmp_path / "router.yaml"
    cfg.write_text("bootstrap: 127.0.0.1:1\nkafka: {sasl.password: " + SECRET + "}\n"
                   "routes: [{name: r, inputs: [r.raw], output: r.out}]\n")
    assert cutover_main(["status", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutover status: kafka setting 'sasl.password' holds a secret in "
                          "clear")
    assert SECRET not in err and "Traceback" not in err


def test_the_plan_key_comes_from_the_environment_or_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUTOVER_PLAN_KEY", raising=False)
    monkeypatch.delenv("CUTOVER_PLAN_KEY_FILE", raising=False)
    assert plan_signing_key() is None
    key = tmp_path / "plan.key"
    key.write_text("k" * 40 + "\n")
    monkeypatch.setenv("CUTOVER_PLAN_KEY_FILE", str(key))
    assert plan_signing_key() == b"k" * 40
    monkeypatch.setenv("CUTOVER_PLAN_KEY", "from-env")
    assert plan_signing_key() == b"from-env"
    monkeypatch.delenv("CUTOVER_PLAN_KEY")
    key.write_text("")
    with pytest.raises(SecretError, match="which is empty"):
        plan_signing_key()
