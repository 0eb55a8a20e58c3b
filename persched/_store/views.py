"""Read-only queries of the dashboard (`persched web`), the metrics and the command line: pages, counts.

Each is a read transaction of a `Store`, paginated by a key the database
has an index on ("after this key", never OFFSET), so a page costs the same at
any size; each query names the index it walks. The queries across namespaces serve
the command line. Why: docs/explanation/store.md, "Pages and health".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import exists, func, select

from .._model.models import JobState
from ._rows import read_row
from .mappers import DESCHEDULED, JOB_COLUMNS, RAW_JOBS, RAW_RUNS, RUN_COLUMNS, to_job, to_run
from .schema import jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from sqlalchemy import ColumnElement, Connection, Select

    from .._model.models import Job, Run
    from . import Store
    from ._rows import StoredRow

T = TypeVar("T")

__all__ = [
    "OUTCOMES",
    "all_jobs_as",
    "all_runs_as",
    "job_counts",
    "job_ids",
    "jobs_page",
    "jobs_query",
    "namespace_counts",
    "namespaces_of",
    "runs_page",
    "runs_query",
    "whereabouts",
]

#: The outcomes the runs page filters by; "running" is a run with no outcome yet.
OUTCOMES: Final = ("ok", "error", "stopped", "lost", "missed", "running")


def job_counts(store: Store) -> dict[str, int]:
    """How many jobs are in each state (descheduled ones left out, as in `jobs()`)."""

    def body(conn: Connection) -> dict[str, int]:
        counts = dict.fromkeys(
            (s.value for s in JobState if s != JobState.DESCHEDULED),
            0,
        )
        query = (
            select(jobs.c.state, jobs.c.paused, func.count())
            .where(jobs.c.state != DESCHEDULED)
            .group_by(jobs.c.state, jobs.c.paused)
        )
        for state, paused, count in conn.execute(query):
            # As `Job.state`: a paused job that is not running shows as paused.
            key = JobState.PAUSED.value if paused and state == JobState.SCHEDULED.value else str(state)
            counts[key] = counts.get(key, 0) + int(count)
        return counts

    return store._read(body, "count jobs")  # the store's read transaction, with its retries


def namespace_counts(store: Store) -> dict[str, dict[str, int]]:
    """How many jobs each namespace has in each state (namespaces with only descheduled jobs left out)."""

    def body(conn: Connection) -> dict[str, dict[str, int]]:
        query = (
            select(jobs.c.namespace, jobs.c.state, jobs.c.paused, func.count())
            .where(jobs.c.state != DESCHEDULED)
            .group_by(jobs.c.namespace, jobs.c.state, jobs.c.paused)
        )
        found: dict[str, dict[str, int]] = {}
        for namespace, state, paused, count in conn.execute(query):
            counts = found.setdefault(
                str(namespace), dict.fromkeys((s.value for s in JobState if s != JobState.DESCHEDULED), 0)
            )
            key = JobState.PAUSED.value if paused and state == JobState.SCHEDULED.value else str(state)
            counts[key] = counts.get(key, 0) + int(count)
        return dict(sorted(found.items()))

    return store._read(body, "count jobs by namespace")


def namespaces_of(store: Store, job_ids: Collection[str]) -> dict[str, str]:
    """The namespace of each of `job_ids` that has a row (a page's worth: one query by primary key)."""
    if not job_ids:
        return {}

    def body(conn: Connection) -> dict[str, str]:
        query = select(jobs.c.job_id, jobs.c.namespace).where(jobs.c.job_id.in_(sorted(job_ids)))
        return {str(job_id): str(namespace) for job_id, namespace in conn.execute(query)}

    return store._read(body, "namespaces of jobs")


def job_ids(store: Store, limit: int) -> list[str]:
    """Up to `limit` ids of the store's namespace's active jobs (one query, for "did you mean ...?")."""

    def body(conn: Connection) -> list[str]:
        query = select(jobs.c.job_id).where(jobs.c.state != DESCHEDULED, jobs.c.namespace == store.namespace)
        return [str(job_id) for (job_id,) in conn.execute(query.limit(limit))]

    return store._read(body, "job ids")


def all_jobs_as(store: Store, make: Callable[[StoredRow], T]) -> list[T]:
    """Every active job of every namespace, by namespace then next run, each row made by `make`."""

    def body(conn: Connection) -> list[T]:
        query = (
            select(*RAW_JOBS)
            .where(jobs.c.state != DESCHEDULED)
            .order_by(jobs.c.namespace, jobs.c.next_run_at, jobs.c.job_id)
        )
        return [make(read_row(JOB_COLUMNS, row._mapping)) for row in conn.execute(query)]

    return store._read(body, "jobs of every namespace")


def all_runs_as(store: Store, make: Callable[[StoredRow], T], job_id: str | None, limit: int) -> list[T]:
    """The latest `limit` runs of every namespace (of `job_id` if given), newest first, each made by `make`."""
    query = _runs_query(job_id=job_id, outcome=None, before=None, limit=limit)

    def body(conn: Connection) -> list[T]:
        return [make(read_row(RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

    return store._read(body, "runs of every namespace")


def whereabouts(store: Store, job_id: str) -> tuple[str, bool] | None:
    """The namespace of `job_id`'s row and whether the job is active there; None if it has no row."""

    def body(conn: Connection) -> tuple[str, bool] | None:
        row = conn.execute(select(jobs.c.namespace, jobs.c.state).where(jobs.c.job_id == job_id)).first()
        return None if row is None else (str(row.namespace), row.state != DESCHEDULED)

    return store._read(body, "where is a job")


def _of_namespaces(column: ColumnElement[Any], namespace: str | frozenset[str]) -> ColumnElement[bool]:
    """`column` is `namespace`, or one of them (a dashboard confined to some namespaces)."""
    return column == namespace if isinstance(namespace, str) else column.in_(sorted(namespace))


def jobs_page(
    store: Store, after: str | None, limit: int, *, namespace: str | frozenset[str] | None = None
) -> list[Job]:
    """Up to `limit` active jobs with ids after `after`, in id order, of `namespace` (a set: of those; None: of all)."""
    query = jobs_query(after, limit, namespace=namespace, unindexed=store.dialect.unindexed)

    def body(conn: Connection) -> list[Job]:
        # Raw values, read one by one: a hand-edited row shows as unreadable, not as a failed page.
        return [to_job(read_row(JOB_COLUMNS, row._mapping)) for row in conn.execute(query)]

    return store._read(body, "jobs page")


def runs_page(
    store: Store,
    *,
    job_id: str | None = None,
    outcome: str | None = None,
    before: int | None = None,
    limit: int,
    namespace: str | frozenset[str] | None = None,
) -> list[Run]:
    """Up to `limit` runs older than run `before`, newest first, of `job_id`, `outcome` and `namespace` if given.

    Raises:
        ValueError: `outcome` is not one of `OUTCOMES`.
    """
    query = runs_query(job_id=job_id, outcome=outcome, before=before, limit=limit, namespace=namespace)

    def body(conn: Connection) -> list[Run]:
        return [to_run(read_row(RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

    return store._read(body, "runs page")


def jobs_query(
    after: str | None,
    limit: int,
    *,
    namespace: str | frozenset[str] | None = None,
    unindexed: Callable[[ColumnElement[Any]], ColumnElement[Any]] = lambda column: column,
) -> Select[Any]:
    """The SELECT of `jobs_page` (a test checks its plan); `unindexed` keeps it a walk of the primary key."""
    query = select(*RAW_JOBS).where(jobs.c.state != DESCHEDULED).order_by(jobs.c.job_id).limit(limit)
    if namespace is not None:
        query = query.where(_of_namespaces(unindexed(jobs.c.namespace), namespace))
    return query if after is None else query.where(jobs.c.job_id > after)


def runs_query(
    *,
    job_id: str | None,
    outcome: str | None,
    before: int | None,
    limit: int,
    namespace: str | frozenset[str] | None = None,
) -> Select[Any]:
    """The SELECT of `runs_page` (exposed so that a test can check its query plan).

    Raises:
        ValueError: `outcome` is not one of `OUTCOMES`.
    """
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    query = _runs_query(job_id=job_id, outcome=outcome, before=before, limit=limit)
    if namespace is None:
        return query
    # Correlated: each run's job by primary key (a store's `_in_namespace` does the same).
    return query.where(exists().where(jobs.c.job_id == runs.c.job_id, _of_namespaces(jobs.c.namespace, namespace)))


def _runs_query(*, job_id: str | None, outcome: str | None, before: int | None, limit: int) -> Select[Any]:
    if outcome == "running":
        # Open runs are few: find them by their partial index and sort them. `run_id + 0` keeps
        # the planners from walking the whole history back by primary key to find one.
        key = runs.c.run_id + 0
        query = select(*RAW_RUNS).where(runs.c.outcome.is_(None)).order_by(key.desc()).limit(limit)
        if job_id is not None:
            query = query.where(runs.c.job_id == job_id)
        return query if before is None else query.where(key < before)
    query = select(*RAW_RUNS).order_by(runs.c.run_id.desc()).limit(limit)
    if job_id is not None:
        query = query.where(runs.c.job_id == job_id)
    if outcome == "ok":
        query = query.where(runs.c.outcome == "ok")
    elif outcome is not None:
        # The second term is the partial index's own predicate (SQLite proves no implications).
        query = query.where(runs.c.outcome == outcome, runs.c.outcome != "ok")
    if before is not None:
        query = query.where(runs.c.run_id < before)
    return query
