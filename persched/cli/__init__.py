"""The ``persched`` command line: inspect and steer schedules from outside the process.

Commands (``persched COMMAND --help`` shows each with an example)::

    persched demo                        # a self-contained tour; ends by itself
    persched migrate                     # create the database / upgrade its schema
    persched jobs [--json] [--all-namespaces]   # every job not descheduled, its schedule and state
    persched show JOB_ID [--json]        # one job, its policies and its latest runs
    persched runs [JOB_ID] [--limit N] [--json] [--all-namespaces]
    persched deschedule JOB_ID
    persched pause JOB_ID                # no run starts until resumed
    persched resume JOB_ID               # continue on the schedule from now
    persched run-now JOB_ID              # one extra run as soon as a worker is free
    persched run MODULE [--workers N] [--allow PKG ... | --allow-any-module] [--metrics-port N]
                                         # (`--import MODULE` names the module too)
    persched web [--port N] [--token-file PATH] [--allowed-host NAME ...]   # a dashboard in the browser

The database comes from ``--db URL`` (before or after the command), else the
``PERSCHED_DB`` environment variable, else ``persched.db`` in the current
directory; the namespace from ``--namespace NAME``, else ``PERSCHED_NAMESPACE``,
else "default". ``--json`` may come before the command too; ``--version``
prints the version. A listing of a namespace without jobs says which
namespaces have some; an unknown job id is reported with the namespace that
holds it, or a near miss ("did you mean 'report'?").

``jobs``, ``show`` and ``runs`` never create a database and never change its
schema; ``pause``, ``resume``, ``run-now`` and ``deschedule`` write one row
and never migrate; a scheduler running on the database picks the change up
(within its ``pickup_seconds``, 1 s by default).

One rule for the verbs: a command exits 0 when the job ends up as asked,
also when it already was (``pause`` of a paused job, ``resume`` of a job that
is not paused, ``deschedule`` of a descheduled job, a second ``run-now``: each
says "nothing changed"); it exits 1 when it cannot be done: the job is
unknown (or, for ``pause``, ``resume`` and ``run-now``, descheduled), or
``run-now`` of a paused or finished job, or dropped by overlap "skip".

Exit codes: 0 success; 1 an error (that rule, an unusable database, schema
from a newer persched, a module that does not import); 2 bad usage; 130
interrupted (Ctrl-C during a read command); 141 (128 + SIGPIPE) when the
reader of the output went away (``persched runs | head -1``), quietly. ``persched run`` exits 0 after a graceful
stop on SIGINT/SIGTERM, and 128 + the signal number when a second signal
forces it out. Errors are one line on stderr; ``--debug`` adds the traceback
and DEBUG logging.

The package parses, calls into persched and prints; it holds no SQL and
starts no threads of its own (``run`` starts a `JobScheduler`). Its modules:
`entry` (`main`: the exit codes of every way a command ends), `parser`
(every verb and option), one module per group of verbs -- `listing` (jobs,
show, runs), `steering` (deschedule, pause, resume, run-now), `service`
(run, web), `database` (migrate, demo) -- and what they share: `output`
(lines and tables fitted to the terminal), `lookup` (the database and the
job a command names), `exits` (exit codes, one-line errors). The words in
the cells (instants, durations, states, outcomes) are `persched._interfaces.present`'s,
shared with the dashboard.
"""

from __future__ import annotations

from .entry import main
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main"]
