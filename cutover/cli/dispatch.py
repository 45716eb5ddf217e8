"""Running a parsed command: its errors become one sentence on stderr and an exit code, never
a traceback (the ``cutover`` console script, and the demo's own operator commands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from cutover.cli.errors import CliError
from cutover.settings import SettingsError


def run_command(args: argparse.Namespace,
                before: Callable[[], None] | None = None) -> int:
    """``args.func(args)``'s exit code (``before`` runs first, under the same error sentences)."""
    try:
        if before is not None:
            before()
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
