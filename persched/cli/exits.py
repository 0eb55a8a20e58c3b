"""Exit codes, and the error a user is told in one line (never a traceback).

`CliError` is a user error of the command line's own (a bad job id, a module
that does not import); persched's own errors (`PerschedError`) are told the
same way. `one_line` makes any text safe for that one line.
"""

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
