"""``instances`` (the live schedulers) and ``check`` (problems, exit 1).

Both only read, never migrate: they work when every scheduler is dead, which is when they are needed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._engine.liveness import display_id
from .._interfaces.present import iso, problem_words, relative
from .._model.instant import seconds
from .._store.health import live_instances, problems
from .exits import EXIT_ERROR, EXIT_OK
from .lookup import with_store
from .output import NAMESPACE_COLUMN, Column, fit_table, json_text, say, table_width
from .when import instant_now

if TYPE_CHECKING:
    import argparse

    from .._store import Store
    from .._store.health import InstanceRow, Problem

__all__ = ["cmd_check", "cmd_instances", "no_scheduler_note"]


def _host_and_pid(instance_id: str) -> tuple[str, str]:
    """The host and pid of a default instance id (``host:pid:random``); "-" for a custom id."""
    parts = display_id(instance_id).split(":")
    if len(parts) == 3 and parts[1].isdigit():
        return parts[0], parts[1]
    return "-", "-"


def _instance_json(row: InstanceRow) -> dict[str, Any]:
    host, pid = _host_and_pid(row.instance_id)
    return {
        "namespace": row.namespace,
        "instance_id": row.instance_id,
        "host": None if host == "-" else host,
        "pid": None if pid == "-" else int(pid),
        "started_at": _iso_json(row.started_at),
        "renewed_at": _iso_json(row.renewed_at),
        "lease_until": _iso_json(row.lease_until),
        "shares_work": row.shares,
    }


def _iso_json(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def cmd_instances(args: argparse.Namespace) -> int:
    def body(store: Store) -> int:
        now = instant_now()
        rows = live_instances(store, now, all_namespaces=args.all_namespaces)
        if args.json:
            say(json_text([_instance_json(row) for row in rows]))
            return EXIT_OK
        if not rows:
            where = "any namespace" if args.all_namespaces else f"namespace {store.namespace!r}"
            say(f"no live scheduler in {where} of {store.url}")
            return EXIT_OK
        at = datetime.fromtimestamp(seconds(now), timezone.utc)
        columns: list[Column | str] = [
            *([NAMESPACE_COLUMN] if args.all_namespaces else []),
            Column("INSTANCE", own_line=True),  # a long id on a line of its own, never cut
            "HOST",
            "PID",
            "STARTED",
            "RENEWED",
        ]
        table = []
        for row in rows:
            host, pid = _host_and_pid(row.instance_id)
            cells = [display_id(row.instance_id), host, pid, iso(row.started_at), relative(row.renewed_at, at)]
            table.append([*([row.namespace] if args.all_namespaces else []), *cells])
        say(fit_table(columns, table, table_width(args)))
        return EXIT_OK

    return with_store(args, body, read_only=True)


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {
        "problem": problem.kind,
        "namespace": problem.namespace,
        "job_id": problem.job_id,
        "at": _iso_json(problem.at),
        "message": problem_words(problem),
    }


def cmd_check(args: argparse.Namespace) -> int:
    def body(store: Store) -> int:
        found = problems(store, instant_now(), all_namespaces=args.all_namespaces, failures=args.failures)
        if args.json:
            say(json_text([_problem_json(problem) for problem in found]))
        elif not found:
            where = "every namespace" if args.all_namespaces else f"namespace {store.namespace!r}"
            say(f"ok: {where} of {store.url} is healthy")
        for problem in [] if args.json else found:
            say(problem_words(problem))
        return EXIT_ERROR if found else EXIT_OK

    return with_store(args, body, read_only=True)


def no_scheduler_note(store: Store) -> str | None:
    """The last line of ``persched jobs`` when no scheduler is alive for the namespace, else None."""
    if live_instances(store, instant_now()):
        return None
    return f"no scheduler is alive for namespace {store.namespace!r}: these jobs do not run (see `persched check`)"
