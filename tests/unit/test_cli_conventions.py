"""What every ``cutover`` command shares: a version, help and a default shown for every flag,
its exit codes at the end of its --help, one name per thing across commands, --json where a
command reads state, and a refusal that is its sentence alone."""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cutover.cli import EXIT_CODES, build_parser, main, package_version
from cutover.cli.client_logs import ClientLogFilter, keep_client_logs_out


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and action parser, by its full name (``plan show``)."""
    def walk(prefix: str, parser: argparse.ArgumentParser
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    full = f"{prefix} {name}".strip()
                    yield full, sub
                    yield from walk(full, sub)
    yield from walk("", build_parser())


COMMANDS = dict(_commands())
READS_STATE = ("status", "wait", "plan show", "plan validate", "compare", "init", "doctor",
               "rollout status")


def test_cutover_version_prints_the_installed_version(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"cutover {package_version()}"
    assert package_version() != "unknown"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_has_help_and_shows_its_default(name: str) -> None:
    parser = COMMANDS[name]
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert action.help, f"`cutover {name}` {flag} has no help"
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
            assert "default" in parser._get_formatter()._expand_help(action), \
                f"`cutover {name}` {flag} does not show its default {action.default!r}"
    assert "default:" in text or not any(a.default not in (None, False, [], argparse.SUPPRESS)
                                         for a in parser._actions if a.option_strings)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_ends_with_the_exit_codes(name: str) -> None:
    text = COMMANDS[name].format_help()
    assert "exit codes: 0 " in text, f"`cutover {name} --help` names no exit codes"
    assert text.rstrip().endswith(EXIT_CODES[name.split()[0]].rstrip()[-20:])


@pytest.mark.parametrize("name", READS_STATE)
def test_every_command_that_reads_state_has_json(name: str) -> None:
    assert "--json" in COMMANDS[name]._option_string_actions, f"`cutover {name}` has no --json"


def test_the_version_to_move_to_is_named_to_in_every_command() -> None:
    for name in ("switch", "rollout", "compare"):
        assert "--to" in COMMANDS[name]._option_string_actions, name
    assert COMMANDS["compare"]._option_string_actions["--from"].dest == "old"


def test_compare_still_takes_new_and_old_but_says_to_use_to_and_from(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = COMMANDS["compare"].parse_args(["--config", "x.yaml", "--route", "r", "--new", "g",
                                           "--old", "b"])
    assert (args.new, args.old) == ("g", "b")
    err = capsys.readouterr().err
    assert "--new is deprecated" in err and "use --to" in err
    assert "--old is deprecated" in err and "use --from" in err


def test_the_kafka_clients_own_lines_are_kept_out_and_other_logs_pass() -> None:
    f = ClientLogFilter()
    client = logging.LogRecord("cutover.router", logging.ERROR, __file__, 1, "%s [%s] %s",
                               ("FAIL", "rdkafka#consumer-1", "SASL authentication error"), None)
    ours = logging.LogRecord("cutover.router", logging.WARNING, __file__, 1,
                             "control record rejected: %s", ("bad",), None)
    assert not f.filter(client) and f.filter(ours)
    assert list(f.kept) == ["kafka client ERROR: FAIL [rdkafka#consumer-1] SASL authentication "
                            "error"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_command_refused_by_an_absent_broker_prints_its_sentence_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, librdkafka's own "Connect to ipv4#... failed" lines came first."""
    settings = tmp_path / "router.yaml"
    settings.write_text(f"bootstrap: 127.0.0.1:{_closed_port()}\n"
                        "routes: [{name: orders, inputs: [orders.raw], output: orders}]\n")
    assert main(["status", "--config", str(settings)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cutover status: "), err
    kept = keep_client_logs_out()
    assert any("Connect to" in line or "refused" in line.lower() for line in kept.kept), \
        "the client's lines were not kept for -v"


SETTINGS_READERS = {
    "compare": ["--to", "green"],
    "init": ["--primary", "blue"],
    "doctor": ["--role", "router"],
    "rollout": ["--to", "green", "--compare", "--start", "true", "--stop-old", "true"],
}


@pytest.mark.parametrize("command", sorted(SETTINGS_READERS))
def test_a_route_not_in_the_settings_file_is_refused_alike_by_every_command(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text("bootstrap: 127.0.0.1:9\nroutes:\n"
                   "  - {name: orders, inputs: [orders.raw], output: orders}\n"
                   "  - {name: totals, inputs: [totals.raw], output: totals}\n")
    code = main([command, "--config", str(cfg), "--route", "order",
                 *SETTINGS_READERS[command]])
    assert code == 2
    assert capsys.readouterr().err == (
        f"cutover {command}: route 'order' is not in {cfg}; routes there: orders, totals\n")


@pytest.mark.parametrize("command", [*sorted(SETTINGS_READERS), "router", "status"])
def test_a_settings_file_that_does_not_load_is_refused_alike_by_every_command(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text("bootstrap: 127.0.0.1:9\nroutes: []\nno_such_setting: 1\n")
    route = [] if command in ("router",) else ["--route", "orders"]
    code = main([command, "--config", str(cfg), *route, *SETTINGS_READERS.get(command, [])])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"cutover {command}: ") and err.endswith(" (fix the settings file)\n")
