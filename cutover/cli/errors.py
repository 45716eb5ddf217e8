"""The operator error every command raises, in a leaf module: the command modules, the
``tag`` command's (spark_tagger.cli) and the dispatcher import it without importing the CLI
that loads them."""

from __future__ import annotations


class CliError(Exception):
    """An operator error: the message says what is wrong and how to fix it."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
