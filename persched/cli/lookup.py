"""The database a command works on (`with_store`: never created, never migrated), and the job or namespace it names.

A job not found names where it is instead (`missing_job`); an empty namespace, those with jobs (`say_empty`).
"""

from __future__ import annotations

import difflib
import shlex
import sys
from typing import TYPE_CHECKING, Final

from .._interfaces.existing import open_existing
from .._interfaces.present import plural
from .._model.models import validate_job_id
from .._store.views import job_ids, namespace_counts, whereabouts
from ..errors import JobNotFoundError, PerschedError
from .exits import CliError
from .output import say

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from .._store import Store

__all__ = ["missing_job", "require_job_id", "say_empty", "with_store"]


def with_store(args: argparse.Namespace, body: Callable[[Store], int], *, read_only: bool = False) -> int:
    """Run `body` on the store of ``--db`` and ``--namespace``; close it after."""
    store = open_existing(args.db, args.namespace, read_only=read_only)
    try:
        return body(store)
    finally:
        store.engine.dispose()


def require_job_id(job_id: str) -> str:
    try:
        return validate_job_id(job_id)
    except PerschedError as exc:
        raise CliError(f"bad job id: {exc}") from exc


# "did you mean" looks among at most this many ids, else offers none: difflib's cost grows with each
# (CPython's own suggestions stop at 750 names).
MAX_SUGGESTION_IDS: Final = 1000


def missing_job(store: Store, job_id: str) -> JobNotFoundError:
    """The error for a job id that the chosen namespace does not have: where the job is, or a near miss."""
    found = whereabouts(store, job_id)
    if found is not None and found[0] != store.namespace and found[1]:
        owner = found[0]
        return JobNotFoundError(job_id, store.namespace, owner=owner, remedy=f"add --namespace {shlex.quote(owner)}")
    if found == (store.namespace, False):
        return JobNotFoundError(
            job_id, store.namespace, descheduled=True, remedy=f"`persched runs {shlex.quote(job_id)}` shows its history"
        )
    ids = job_ids(store, MAX_SUGGESTION_IDS + 1)
    near = difflib.get_close_matches(job_id, ids, n=1) if len(ids) <= MAX_SUGGESTION_IDS else []
    remedy = f"did you mean {near[0]!r}?" if near else "`persched jobs` lists its jobs"
    return JobNotFoundError(job_id, store.namespace, remedy=remedy)


MAX_NAMESPACES_NAMED: Final = 10  # namespaces listed by name when the chosen one is empty


def _other_namespaces(store: Store) -> list[str]:
    """When the chosen namespace has no job: lines that say which namespaces have jobs (none: no lines)."""
    counts = {name: sum(states.values()) for name, states in namespace_counts(store).items()}
    if not counts or store.namespace in counts:
        return []  # nothing anywhere, or the chosen namespace has jobs (just no runs yet)
    named = [f"{name} ({plural(count, 'job')})" for name, count in list(counts.items())[:MAX_NAMESPACES_NAMED]]
    if len(counts) > MAX_NAMESPACES_NAMED:
        named.append(f"and {len(counts) - MAX_NAMESPACES_NAMED} more")
    near = difflib.get_close_matches(store.namespace, list(counts), n=1)
    return [
        "namespaces with jobs: " + ", ".join(named),
        f"did you mean --namespace {shlex.quote(near[0])}? (or --all-namespaces for all of them)"
        if near
        else "choose one with --namespace NAME, or all of them with --all-namespaces",
    ]


def say_empty(store: Store, headline: str, *, json_output: bool) -> None:
    """Say that the chosen namespace has nothing to list, and where the jobs are if elsewhere.

    With `json_output` stdout carries only the JSON; the namespaces go to stderr as a note.
    """
    others = _other_namespaces(store)
    if json_output:
        if others:
            print(f"persched: note: namespace {store.namespace!r} has no jobs; {others[0]}", file=sys.stderr)  # noqa: T201
        return
    say(f"{headline} in namespace {store.namespace!r} of {store.url}")
    for line in others:
        say(line)
