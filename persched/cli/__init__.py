"""The ``persched`` command line: inspect and steer schedules from outside the process.

The parser's help is the reference (docs/reference/cli.md); docs/operations.md shows the commands at
work. The package parses, calls into persched and prints: no SQL, no threads of its own. `entry`
holds `main` and the exit codes; `parser` every verb; one module per group of verbs (`listing`,
`coming`, `health`, `steering`, `service`, `database`); and what they share (`output`, `lookup`,
`when`, `exits`).
"""

from __future__ import annotations

from .entry import main
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main"]
