"""Exit codes, and the one line (never a traceback) a user error is told in (`CliError`, `one_line`)."""

from __future__ import annotations

from typing import Final

from .output import printable

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "CliError", "one_line"]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1  # a user error: unknown job, unusable database, newer schema, bad module


EXIT_USAGE: Final = 2  # bad command-line usage (argparse's convention)


EXIT_INTERRUPTED: Final = 130  # Ctrl-C during a read command (128 + SIGINT)


EXIT_PIPE: Final = 141  # the reader of stdout went away (128 + SIGPIPE), as `cat` or `yes` would


class CliError(Exception):
    """A user error: printed as one line, exit code 1."""


def one_line(text: object) -> str:
    return printable(" ".join(str(text).split()))
