"""The entry point, ``persched.cli:main``: parse, run the verb, and turn every way it ends into an exit code.

A user error is one line and 1 (``--debug`` adds the traceback), Ctrl-C 130, a closed stdout 141.
Only here is logging configured.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING

from .._model.models import validate_namespace
from ..errors import PerschedError
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE, CliError, one_line
from .output import printable
from .parser import parse

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["TerminalFormatter", "main"]


class TerminalFormatter(logging.Formatter):
    """The log lines of the command line, with the terminal escapes of a job's error or id escaped."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record's line (and traceback), escaped by `persched.cli.output.printable`."""
        return printable(super().format(record), lines=True)


def _configure_logging(args: argparse.Namespace) -> None:
    if args.debug:
        level = logging.DEBUG
    elif args.verbose or args.command in ("run", "web"):
        level = logging.INFO
    else:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    formatter = TerminalFormatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)-7s %(name)s [%(threadName)s] %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)


def _closed_pipe() -> int:
    """End quietly after the reader of stdout went away."""
    # Python flushes stdout again at exit and would complain: point it at /dev/null (the `signal` docs' recipe).
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is not a real file (tests capturing it): nothing to flush at exit
    return EXIT_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (docs/operations.md, "Exit codes").

    Args:
        argv: The arguments after the program name; default ``sys.argv[1:]``.
    """
    args = parse(argv)
    try:
        validate_namespace(args.namespace)
    except PerschedError as exc:
        sys.stderr.write(f"persched: error: bad --namespace: {one_line(exc)}\n")
        return EXIT_ERROR
    _configure_logging(args)
    try:
        result: int = args.func(args)
    except (CliError, PerschedError) as exc:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"persched: error: {one_line(exc)}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("persched: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as exc:  # noqa: BLE001 - a user sees one line; --debug shows the traceback
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(
            f"persched: error: unexpected {type(exc).__name__}: {one_line(exc)} (rerun with --debug for details)\n"
        )
        return EXIT_ERROR
    return result
