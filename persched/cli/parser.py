"""The argument parser: every verb, its options and its help, and the options that may come before the verb.

Defaults come from the environment (``--db``, else ``PERSCHED_DB``, else ``persched.db``); a usage
error is one line on stderr and exit code 2 (`Parser.error`).
"""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .. import __version__
from .._engine.config import DEFAULT_WORKERS
from .._model.models import DEFAULT_NAMESPACE
from .coming import cmd_next
from .database import cmd_demo, cmd_migrate
from .exits import EXIT_USAGE
from .health import cmd_check, cmd_instances
from .listing import cmd_jobs, cmd_runs, cmd_show
from .output import printable
from .service import SETUP_HOOK, cmd_run, cmd_web
from .steering import cmd_cancel, cmd_deschedule, cmd_pause, cmd_resume, cmd_run_now

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["ENV_DB", "Parser", "build_parser", "parse"]

DEFAULT_DB: Final = "persched.db"
ENV_DB: Final = "PERSCHED_DB"
ENV_NAMESPACE: Final = "PERSCHED_NAMESPACE"
MAX_CLI_INT: Final = 2**31 - 1  # --limit, --workers: what a SQL LIMIT takes everywhere
SHOW_RUNS: Final = 10  # runs listed by `show` unless --limit says otherwise


JSON_COMMANDS: Final = ("jobs", "show", "runs", "instances", "check", "next")  # the commands that print --json
DEFAULT_FAILURES: Final = 3  # `check`: failed runs in a row that make a job "failing"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2); `commands` holds the subcommands' parsers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - argparse's own parameters
        super().__init__(*args, **kwargs)
        self.commands: dict[str, Parser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")


def _example(text: str) -> str:
    return "example:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ") + "\n"


def build_parser() -> Parser:
    """Build the argument parser (exposed for documentation and tests)."""
    common = Parser(add_help=False)
    # SUPPRESS: a value given before the command is not reset by the subparser.
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"SQLAlchemy URL or SQLite file path (default: ${ENV_DB} or {DEFAULT_DB})",
    )
    common.add_argument(
        "--namespace",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help=f"the application whose jobs to see and run (default: ${ENV_NAMESPACE} or {DEFAULT_NAMESPACE})",
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and DEBUG logging"
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="INFO logging")

    parser = Parser(
        prog="persched",
        description="Run callables at fixed intervals or on cron expressions; every schedule lives in SQL.",
        epilog=textwrap.dedent(
            """\
            exit codes: 0 ok (also when the job already was as asked), 1 error (one line
            on stderr), 2 usage, 130 interrupted, 141 output pipe closed (quietly);
            `run` exits 0 after a graceful stop, 128+N when a second signal N forces it.

            example:
              persched --db sqlite:///jobs.db jobs"""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"persched {__version__}")
    # Before the command as after it, like --db; its own dest, or the command's default would reset it.
    parser.add_argument(
        "--json", dest="json_first", action="store_true", help=f"JSON output (of {', '.join(JSON_COMMANDS)})"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    def command(
        name: str, summary: str, example: str, func: Callable[[argparse.Namespace], int], details: str = ""
    ) -> Parser:
        sub: Parser = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog=(textwrap.fill(details, 79) + "\n\n" if details else "") + _example(example),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common],
        )
        sub.set_defaults(func=func)
        parser.commands[name] = sub
        return sub

    command(
        "demo",
        "schedule a few jobs, show them run, restart, show they resume (ends by itself)",
        "persched demo",
        cmd_demo,
        "The demo works on a new database of its own in a new temporary directory (it says where),"
        " never the one named by --db or PERSCHED_DB, so it can never change your jobs.",
    )
    command(
        "migrate",
        "create the database if needed and upgrade its schema to the newest revision",
        "persched --db postgresql+psycopg://app@db/app migrate",
        cmd_migrate,
    )
    sub = command(
        "jobs",
        "list every job not descheduled (scheduled, running, paused, finished) with its schedule (read-only)",
        "persched --db jobs.db jobs --json",
        cmd_jobs,
    )
    sub.add_argument("--json", action="store_true", help="print a JSON array of jobs (Job field names)")
    _add_all_namespaces(sub, "jobs")
    _add_wide(sub)
    sub = command(
        "show",
        "show one job, its schedule, the policies that differ from the defaults and its latest runs (read-only)",
        "persched show report --limit 5",
        cmd_show,
        "The retry options are one line (retries: 3 (first after 10 s, each delay x2, at most 5 min));"
        " while a retry is pending, the next run says which attempt of which slot it is.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub.add_argument("--limit", type=_positive_int, default=SHOW_RUNS, metavar="N", help=f"runs to show ({SHOW_RUNS})")
    sub.add_argument("--json", action="store_true", help="print the job as a JSON object with a 'runs' array")
    _add_wide(sub)
    sub = command(
        "runs",
        "list recorded runs, newest first (read-only)",
        "persched runs report --limit 20",
        cmd_runs,
        "A job with retries tries a failed run again within its slot: each attempt is a run of"
        " the same SCHEDULED FOR, and a TRY column (1, 2, ...) numbers them when a listed run is a retry.",
    )
    sub.add_argument("job_id", metavar="JOB_ID", nargs="?", help="only this job's runs")
    sub.add_argument("--limit", type=_positive_int, default=100, metavar="N", help="runs to show (100)")
    sub.add_argument("--json", action="store_true", help="print a JSON array of runs (Run field names)")
    _add_all_namespaces(sub, "runs")
    _add_wide(sub)
    sub = command(
        "next",
        "list a job's coming slots in UTC and in its time zone, daylight-saving changes marked (read-only)",
        "persched next nightly-report --count 5",
        cmd_next,
        "The slots the job will run: its schedule in its time zone, its window and a pause with an"
        " end; none for a job paused without an end or finished.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub.add_argument("--count", type=_positive_int, default=10, metavar="N", help="slots to list (10; at most 1000)")
    sub.add_argument("--json", action="store_true", help="print a JSON array of the slots (ISO-8601, UTC)")
    sub = command(
        "instances",
        "list the live schedulers of the namespace: instance id, host, pid, started, last renewal (read-only)",
        "persched --db jobs.db instances --all-namespaces",
        cmd_instances,
        "Read from the database alone: a scheduler is alive while its heartbeat keeps renewing its row.",
    )
    sub.add_argument("--json", action="store_true", help="print a JSON array of the instances")
    _add_all_namespaces(sub, "instances")
    sub = command(
        "check",
        "exit 0 if the namespace is healthy, else 1 with one line per problem (read-only, for monitoring)",
        "persched --db postgresql+psycopg://app@db/app check --all-namespaces",
        cmd_check,
        "Problems: no live scheduler for a namespace whose jobs wait to run; a job overdue (its next"
        " run older than its grace plus the lease, not paused); a job whose last N runs all failed."
        " Reads only the database and never writes, so it works when every scheduler is dead.",
    )
    sub.add_argument("--json", action="store_true", help="print the problems as a JSON array ([] when healthy)")
    sub.add_argument(
        "--failures",
        type=_positive_int,
        default=DEFAULT_FAILURES,
        metavar="N",
        help=f"failed runs in a row that make a job failing ({DEFAULT_FAILURES})",
    )
    _add_all_namespaces(sub, "problems", verb="check")
    sub = command(
        "deschedule",
        "remove a job: its current definition never starts again, in any process",
        "persched deschedule report",
        cmd_deschedule,
        "Descheduling a job that is already descheduled changes nothing, says so and exits 0; an"
        " unknown job exits 1 (an error a shell script can test). JobScheduler.deschedule() returns"
        " False for both: in code, no active job removed is an answer, not an error. An application"
        " that declares the job at its start-up (persched_setup) schedules it again when it next"
        " starts: remove the declaration too.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "pause",
        "pause a job (or --all): it keeps its definition and history and starts no run until resumed, in any process",
        "persched pause --all --until 2h --note 'database upgrade'",
        cmd_pause,
        "A run already in flight may finish. --until ends the pause by itself at that instant, once, in"
        " whichever scheduler runs (a span from now: 90m, 2h, 1d; or ISO-8601 with its offset);"
        " --note says why (shown by show and jobs --json). Pausing a job that is already paused, or"
        " finished, changes nothing, says so and exits 0; an unknown or descheduled job exits 1.",
    )
    sub.add_argument("job_id", metavar="JOB_ID", nargs="?")
    sub.add_argument("--all", action="store_true", help="every job of the namespace that is not paused")
    sub.add_argument("--until", metavar="WHEN", help="resume by itself then: 90m, 2h, 1d, or ISO-8601 with offset")
    sub.add_argument("--note", metavar="TEXT", help="why the job is paused (at most 500 characters)")
    sub = command(
        "resume",
        "resume a paused job (or --all) on its schedule from now (slots passed while paused do not run)",
        "persched resume report",
        cmd_resume,
        "Resuming a job that is not paused changes nothing, says so and exits 0; an unknown or"
        " descheduled job exits 1.",
    )
    sub.add_argument("job_id", metavar="JOB_ID", nargs="?")
    sub.add_argument("--all", action="store_true", help="every paused job of the namespace")
    sub = command(
        "run-now",
        "ask for one extra run of a job as soon as a worker is free, without moving its schedule",
        "persched run-now report",
        cmd_run_now,
        "The run obeys the job's overlap policy and starts in whichever scheduler runs on this"
        " database. Exits 0 once a run is pending (asking again adds nothing); exits 1 with one line"
        " on stderr when the job is paused, finished, unknown or descheduled, or when it is running"
        " with overlap 'skip' (the request is dropped).",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "cancel",
        "ask the run of a job in flight to stop, in whichever scheduler runs it; its schedule does not move",
        "persched cancel nightly-export",
        cmd_cancel,
        "The scheduler that runs the job notices within its pickup_seconds: a thread job sees its"
        " stopping event set, an async job's task is cancelled, a process job is terminated, then"
        " killed after its stop_grace_seconds; a run that ends so is recorded as 'stopped'. Exits 0"
        " once the stop is requested, and also when no run is in flight (it says so); exits 1 for an"
        " unknown or descheduled job.",
    )
    sub.add_argument("job_id", metavar="JOB_ID")
    sub = command(
        "run",
        f"import MODULE, start a scheduler and run until SIGINT/SIGTERM; if MODULE defines "
        f"{SETUP_HOOK}(scheduler) it is called with the started scheduler; if that returns JobSpec "
        "values, they are declared with prune (docs: Applications, declared job sets)",
        "persched --db jobs.db run myapp.schedules --workers 4",
        cmd_run,
    )
    sub.add_argument("module", nargs="?", metavar="MODULE", help="dotted module name (or give it as --import MODULE)")
    sub.add_argument("--import", dest="import_module", metavar="MODULE", help="the same as MODULE")
    workers_help = f"worker threads ({DEFAULT_WORKERS})"
    sub.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS, metavar="N", help=workers_help)
    allow = sub.add_mutually_exclusive_group()
    allow.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="MODULE",
        help="also run callables defined in MODULE (or its submodules); repeatable "
        "(default: only MODULE's top-level package of --import)",
    )
    allow.add_argument(
        "--allow-any-module",
        action="store_true",
        help="run whatever callable a job's row names, from any importable module (trust every database writer)",
    )
    sub.add_argument(
        "--metrics-port", type=_port, metavar="N", help="serve Prometheus metrics on this port (persched[metrics])"
    )
    sub.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST", help="address to bind (127.0.0.1)")
    _add_allowed_host(sub, "--metrics-allowed-host")
    sub = command(
        "web",
        "serve a dashboard of this database in the browser: jobs, runs, charts (read-only without --token)",
        "persched --db jobs.db --namespace web web --port 8765 --token-file ~/.persched-token",
        cmd_web,
        "Never creates or migrates the database; works with or without a scheduler running on it."
        " With an access token (--token-file or $PERSCHED_WEB_TOKEN), a browser that signs in with it gets"
        " pause, resume, run-now, cancel and deschedule buttons; every action is logged.",
    )
    sub.add_argument("--port", type=_port, default=8765, metavar="N", help="port to listen on (8765; 0: any free)")
    sub.add_argument("--host", default="127.0.0.1", metavar="HOST", help="address to bind (127.0.0.1)")
    _add_allowed_host(sub, "--allowed-host")
    token = sub.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file", metavar="PATH", help="file whose first line is the access token that enables the actions"
    )
    token.add_argument(
        "--token", metavar="TOKEN", help="the access token itself (visible in the process list: prefer the others)"
    )
    sub.add_argument(
        "--read-timeout", type=_seconds, default=10.0, metavar="S", help="seconds a client has to send its request (10)"
    )
    sub.add_argument(
        "--max-connections", type=_positive_int, default=256, metavar="N", help="connections read at once (256)"
    )
    return parser


def _add_allowed_host(sub: argparse.ArgumentParser, flag: str) -> None:
    sub.add_argument(
        flag,
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this Host (NAME or NAME:PORT; repeatable; '*': any, unsafe);"
        " by default only 127.0.0.1, localhost, [::1] and the bound address",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and less than 86400, got {text[:40]}")
    return value


def _add_all_namespaces(sub: argparse.ArgumentParser, what: str, *, verb: str = "list") -> None:
    sub.add_argument(
        "--all-namespaces",
        action="store_true",
        help=f"{verb} the {what} of every namespace"
        + (", with a NAMESPACE column (--json: a 'namespace' key)" if verb == "list" else ""),
    )


def _add_wide(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--wide",
        action="store_true",
        help="never cut or leave out columns (default at a terminal or with COLUMNS set: fit its width)",
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > MAX_CLI_INT:  # the API refuses it too (a SQL LIMIT, a thread count)
        raise argparse.ArgumentTypeError(f"must be at most {MAX_CLI_INT}, got {text[:40]}")
    return value


def _merge_early_options(parser: Parser, args: argparse.Namespace) -> None:
    """Fold the options that may come before the command into the command's own (usage errors exit 2)."""
    if args.json_first:
        if args.command not in JSON_COMMANDS:
            parser.error(f"--json is an option of {', '.join(JSON_COMMANDS)}, not of {args.command}")
        args.json = True
    if args.command == "run":
        run = parser.commands["run"]
        if args.module is not None and args.import_module is not None:
            run.error("name the module once: `persched run MODULE` or `persched run --import MODULE`")
        args.module = args.module or args.import_module
        if args.module is None:
            run.error("which module? `persched run myapp.schedules` (or `--import myapp.schedules`)")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv` (default ``sys.argv[1:]``) and fill in the defaults (usage errors exit 2).

    ``args.db_given`` says where a database was named (``"--db"``, `ENV_DB`, or None), for the demo.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _merge_early_options(parser, args)
    for name, default in (("debug", False), ("verbose", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    args.db_given = "--db" if hasattr(args, "db") else ENV_DB if os.environ.get(ENV_DB) else None
    if not hasattr(args, "db"):
        args.db = os.environ.get(ENV_DB) or DEFAULT_DB
    if not hasattr(args, "namespace"):
        args.namespace = os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
    return args
