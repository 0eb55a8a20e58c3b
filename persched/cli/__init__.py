"""The ``persched`` command line: inspect and steer schedules from outside the process.

The commands, their options and their exit codes are the parser's help
(``persched --help``, ``persched COMMAND --help``, reproduced in
docs/reference/cli.md); docs/operations.md shows them at work, with the rules
the verbs share (what each writes, when a command exits 0 or 1).

The package parses, calls into persched and prints; it holds no SQL and
starts no threads of its own (``run`` starts a `JobScheduler`). Its modules:
`entry` (`main`: the exit codes of every way a command ends), `parser`
(every verb and option), one module per group of verbs -- `listing` (jobs,
show, runs), `coming` (next), `health` (instances, check), `steering`
(deschedule, pause, resume, run-now, cancel), `service` (run, web),
`database` (migrate, demo) -- and what they share: `output` (lines and
tables fitted to the terminal), `lookup` (the database and the job a command
names), `when` (the instant ``--until`` names), `exits` (exit codes,
one-line errors). The words in
the cells (instants, durations, states, outcomes) are `persched._interfaces.present`'s,
shared with the dashboard.
"""

from __future__ import annotations

from .entry import main
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main"]
