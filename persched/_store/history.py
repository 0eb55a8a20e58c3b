"""The run history: listings, overrun flags and retention.

Retention deletes in short transactions, so a claim waits for at most one.
By count, one DELETE per job keeps its newest `keep_runs` runs and its newest
`keep_error_runs` failed ones: scalar subqueries that walk the job's
``(job_id, run_id)`` index from its newest run, so a DELETE reads about what
the job keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeVar

from sqlalchemy import and_, func, literal_column, select, update

from .._model.instant import to_datetime
from .._model.pauses import FAILED_OUTCOMES
from ._rows import read_row
from .mappers import RAW_RUNS, RUN_COLUMNS, to_run
from .part import Part
from .schema import runs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from sqlalchemy import ColumnElement, Connection

    from .._model.instant import Instant, Micros
    from .._model.models import Run
    from ._rows import StoredRow

T = TypeVar("T")
MAX_BATCHES_BY_AGE: Final = 10  # transactions of `prune_runs` by age per call


def iter_chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Yield `items` in slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


# Literal values, not parameters, so the planner sees that the failed runs' partial index applies.
_FAILED = runs.c.outcome.in_([literal_column(f"'{outcome}'") for outcome in FAILED_OUTCOMES])


def _kept_failure(job_id: str, keep_error_runs: int | None) -> ColumnElement[bool]:
    """A run of `job_id` that is one of its newest `keep_error_runs` failed runs (None: any failed run)."""
    if keep_error_runs is None:
        return _FAILED
    oldest_kept = (
        select(runs.c.run_id)
        .where(runs.c.job_id == job_id, _FAILED)
        .order_by(runs.c.run_id.desc())
        .limit(1)
        .offset(keep_error_runs - 1)
        .scalar_subquery()
    )
    # Fewer failed runs than that: the subquery is NULL, and every failed run is kept.
    return and_(_FAILED, runs.c.run_id >= func.coalesce(oldest_kept, 0))


class HistoryStore(Part):
    """Reading and pruning persched_runs."""

    def list_runs(self, job_id: str | None = None, limit: int = 100) -> list[Run]:
        """Return the newest `limit` runs (of `job_id`, or of every job), newest first."""
        return self.list_runs_as(to_run, job_id, limit)

    def list_runs_as(self, make: Callable[[StoredRow], T], job_id: str | None = None, limit: int = 100) -> list[T]:
        """`list_runs`, each row made by `make` (`mappers.to_run`; `plain_run` for the read commands)."""

        def body(conn: Connection) -> list[T]:
            query = select(*RAW_RUNS).where(self._in_namespace(runs.c.job_id)).order_by(runs.c.run_id.desc())
            query = query.limit(limit)
            if job_id is not None:
                query = query.where(runs.c.job_id == job_id)
            return [make(read_row(RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

        return self._read(body, "runs")

    def runs_in_flight(self) -> list[Run]:
        """Return every run that has no outcome yet (of any instance), oldest first."""
        return self.runs_in_flight_as(to_run)

    def runs_in_flight_as(self, make: Callable[[StoredRow], T]) -> list[T]:
        """`runs_in_flight`, each row made by `make` (as in `list_runs_as`)."""

        def body(conn: Connection) -> list[T]:
            query = select(*RAW_RUNS).where(runs.c.outcome.is_(None)).order_by(runs.c.run_id)
            return [make(read_row(RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

        return self._read(body, "runs in flight")

    def get_run(self, run_id: int) -> Run | None:
        """Return the run `run_id`, or None (never recorded, or pruned)."""

        def body(conn: Connection) -> Run | None:
            row = conn.execute(select(*RAW_RUNS).where(runs.c.run_id == run_id)).first()
            return None if row is None else to_run(read_row(RUN_COLUMNS, row._mapping))

        return self._read(body, "get run")

    def mark_overran(self, run_id: int) -> bool:
        """Flag a run still in flight as having overrun its max_runtime_seconds."""

        def body(conn: Connection) -> bool:
            done = conn.execute(
                update(runs).where(runs.c.run_id == run_id, runs.c.outcome.is_(None)).values(overran=True)
            )
            return done.rowcount == 1

        return self._write(body, "mark overrun")

    def prune_runs(
        self,
        now: Instant,
        *,
        keep_runs: int | None,
        keep_seconds: Micros | None,
        keep_error_runs: int | None = None,
        job_ids: set[str] | frozenset[str] = frozenset(),
        batch: int = 500,
    ) -> int:
        """Delete finished runs beyond the retention; return how many were deleted.

        Runs in flight are never deleted. Each transaction takes at most `batch` jobs (by count) or
        rows (by age), and at most `MAX_BATCHES_BY_AGE` by age run per call. `keep_runs` per job, and
        with it `keep_error_runs` failed ones (None: every failed run); `keep_seconds` after they
        finished; by count only among `job_ids` (see `jobs_over_run_limit`). None: no limit.
        """
        deleted = 0
        if keep_runs is not None:
            for chunk in iter_chunks(sorted(job_ids), batch):

                def by_count(conn: Connection, chunk: Sequence[str] = chunk) -> int:
                    count = 0
                    for job_id in chunk:
                        newest_dropped = (
                            select(runs.c.run_id)
                            .where(runs.c.job_id == job_id)
                            .order_by(runs.c.run_id.desc())
                            .limit(1)
                            .offset(keep_runs)
                            .scalar_subquery()
                        )
                        result = conn.execute(
                            runs.delete().where(
                                runs.c.job_id == job_id,
                                runs.c.outcome.is_not(None),
                                runs.c.run_id <= newest_dropped,
                                ~_kept_failure(job_id, keep_error_runs),
                            )
                        )
                        count += max(result.rowcount, 0)
                    return count

                deleted += self._write(by_count, "prune runs")
        if keep_seconds is not None:
            cutoff = to_datetime(now - keep_seconds)

            def by_age(conn: Connection) -> int:
                oldest = (
                    select(runs.c.run_id)
                    .where(runs.c.outcome.is_not(None), runs.c.finished_at < cutoff, self._in_namespace(runs.c.job_id))
                    .order_by(runs.c.run_id)
                    .limit(batch)
                )
                # The ids first: MySQL and MariaDB refuse LIMIT in an IN subquery (error 1235).
                ids = list(conn.execute(oldest).scalars())
                if not ids:
                    return 0
                return max(conn.execute(runs.delete().where(runs.c.run_id.in_(ids))).rowcount, 0)

            for _ in range(MAX_BATCHES_BY_AGE):
                count = self._write(by_age, "prune runs")
                deleted += count
                if count < batch:
                    break
        return deleted

    def jobs_over_run_limit(self, keep_runs: int) -> set[str]:
        """Return the ids of the jobs that have more than `keep_runs` runs recorded."""

        def body(conn: Connection) -> set[str]:
            query = (
                select(runs.c.job_id)
                .where(self._in_namespace(runs.c.job_id))
                .group_by(runs.c.job_id)
                .having(func.count() > keep_runs)
            )
            return {job_id for (job_id,) in conn.execute(query)}

        return self._read(body, "find runs to prune")
