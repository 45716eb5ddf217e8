"""What every ``cutover`` parser shares: each flag's default shown in ``--help``, and flags kept
for old scripts."""

from __future__ import annotations

import argparse
import sys


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each flag's default after its help (unless the help already says it, or there is none
    to show), and descriptions and epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_ = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS, [])
        if shown and "%(default)" not in help_ and "default" not in help_ \
                and (action.option_strings or action.nargs in (argparse.OPTIONAL,
                                                               argparse.ZERO_OR_MORE)):
            help_ += " (default: %(default)s)"
        return help_


class CutoverParser(argparse.ArgumentParser):
    """Every ``cutover`` parser, sub-commands included: defaults shown in --help."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


class Deprecated(argparse.Action):
    """A flag kept for old scripts: it sets the new flag's value and says to use that."""

    def __init__(self, option_strings: list[str], dest: str, *, use: str,
                 **kwargs: object) -> None:
        self.use = use
        kwargs.setdefault("help", f"deprecated: use {use}")
        super().__init__(option_strings, dest, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated and will be removed; use "
              f"{self.use}", file=sys.stderr)
        setattr(namespace, self.dest, values)
