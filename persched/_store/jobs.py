"""Job definitions: schedule (upsert), declare, deschedule, and reading them back.

Each public method is one transaction and linearizes at its commit;
schedule and deschedule go through the group commit. A declaration first
holds the change counter's row, which every change of a definition writes,
so racing declarations run one after the other and commit whole or not at
all. A descheduled row stays, so a generation is never reused (no ABA). Why:
docs/explanation/store.md, "Definitions".
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, TypeVar, cast

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from .._model.buckets import bucket_of
from .._model.instant import Instant, from_datetime
from .._model.policy import JobPlan, place_grid
from ..errors import InvalidJobError, StoreError
from ._rows import StoredRow, raw_columns, read_row, read_rows
from .dialects import Dialect, Sql, marks
from .mappers import (
    DESCHEDULED,
    FINISHED,
    JOB_COLUMNS,
    RAW_JOBS,
    SCHEDULED,
    generation_of,
    to_job,
)
from .part import Part
from .records import Upserted
from .schema import COUNTER_MAX, UTCDateTime, jobs, runs
from .shapes import Shapes, raw_row, raw_value, written_over

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Sequence

    from sqlalchemy import Connection

    from .._model.models import Job, JobDefinition
    from .shapes import RawRow


logger = logging.getLogger(__name__)

T = TypeVar("T")


# schedule() and deschedule() in driver SQL, built once (docs/explanation/store.md, "The driver cursor").
_FIND_JOB: Final = "SELECT {} FROM persched_jobs WHERE job_id = ?"  # `_job_columns`
_JOBS_WHERE: Final = "FROM persched_jobs WHERE"  # after `_job_columns` (`Dialect.select_many`); + `any_of`
# Whether the id has a row, locking it: a new id is looked for with one column, not all.
_PROBE_JOB: Final = "SELECT state FROM persched_jobs WHERE job_id = ?"
_MARK_DECLARED_WHERE: Final = "UPDATE persched_jobs SET declared = ? WHERE"  # + job_id = ? or `any_of`
# The change counter's row, read locking: a declaration holds it to its commit, and writes nothing unchanged.
_HOLD_CHANGES: Final = "SELECT seq FROM persched_changes WHERE id = 1"
_IDS_PER_QUERY: Final = 10_000  # ids bound in one IN (...) at most, and fewer where the engine takes fewer
_PARAMETERS_SPARE: Final = 8  # a statement's parameters besides its ids


@functools.lru_cache(maxsize=8)
def _job_columns(dialect: Dialect) -> tuple[str, ...]:
    """The select list of a job's row (`JOB_COLUMNS`, in order), its instants as the dialect reads them best."""
    return tuple(
        dialect.read_instant_sql(column.name) if isinstance(column.type, UTCDateTime) else column.name
        for column in JOB_COLUMNS
    )


@functools.lru_cache(maxsize=16)
def _insert_job(names: tuple[str, ...]) -> str:
    """The INSERT of a new job's row, its columns `names` (each schedule() writes the same ones)."""
    return f"INSERT INTO persched_jobs ({', '.join(names)}) VALUES ({marks(len(names))})"  # noqa: S608 - ours


@functools.lru_cache(maxsize=16)
def _replace_job(names: tuple[str, ...]) -> str:
    """The UPDATE that replaces a job's row by its job_id, writing the columns `names`."""
    return f"UPDATE persched_jobs SET {', '.join(f'{name} = ?' for name in names)} WHERE job_id = ?"  # noqa: S608


_ACTIVE_JOB: Final = "job_id = ? AND state <> ? AND namespace = ?"  # (job_id, DESCHEDULED, namespace)
_DECLARED_JOBS: Final = "state <> ? AND declared = ? AND namespace = ?"  # (DESCHEDULED, True, namespace)
# What a deschedule writes (`JobsStore._descheduled`): (DESCHEDULED, updated_at, change_seq).
_DESCHEDULE: Final = "state = ?, owner = NULL, lease_until = NULL, updated_at = ?, change_seq = ?"


class _Written(NamedTuple):
    """What an upsert's body did: the row as it now stands, raw; `own`: its own columns read already, or None."""

    row: RawRow
    change: Literal["created", "replaced", "unchanged"]
    due: Instant | None
    own: StoredRow | None = None


class _Decision(NamedTuple):
    """What an upsert writes (`kind`, `values`) and what it then returns (`written`)."""

    written: _Written
    kind: Literal["insert", "replace", "mark", "keep"]
    values: dict[str, Any] | None = None

    def statement(self) -> Sql | None:
        """The write of this one decision (schedule()'s), or None."""
        job_id = raw_value(self.written.row, "job_id")
        if self.kind == "insert" and self.values is not None:
            return Sql(_insert_job(tuple(self.values)), tuple(self.values.values()))
        if self.kind == "replace" and self.values is not None:
            return Sql(_replace_job(tuple(self.values)), (*self.values.values(), job_id))
        return Sql(f"{_MARK_DECLARED_WHERE} job_id = ?", (True, job_id)) if self.kind == "mark" else None


def _next_generation(conn: Connection, row: StoredRow, argument: str) -> int:
    """The generation a replacement of `row` gets: never one used before (no ABA).

    Raises:
        InvalidJobError: The last one was `COUNTER_MAX` (a hand-edited row), named as `argument`.
    """
    unreadable = "generation" in row.problems
    if unreadable:  # the counter itself was edited away: go on after every generation its runs recorded
        recorded = conn.execute(select(*raw_columns([runs.c.generation])).where(runs.c.job_id == row.job_id)).scalars()
        last = max((generation_of(g) for g in recorded), default=0)
    else:
        last = int(row.generation)
    if last >= COUNTER_MAX:  # never saturated: a generation used again would let an old run's claim pass
        raise InvalidJobError(
            argument,
            f"{row.job_id!r} is at generation {last}, the last a 64-bit column holds, so it cannot be replaced "
            "(no job is replaced that often: its row was edited by hand); set persched_jobs.generation back "
            "below that and above every generation of the job in persched_runs, or schedule the new definition "
            "under another job id",
        )
    if unreadable:
        logger.warning(
            "job %s: its stored generation cannot be read (%s); the replacement is generation %d",
            row.job_id,
            row.problems["generation"],
            last + 1,
        )
    return last + 1


def _upserted(done: _Written) -> Upserted:
    """The `Upserted` of an upsert's body, its Job made after the commit (on the caller's thread)."""
    return Upserted(to_job(read_rows(JOB_COLUMNS, (done.row,))[0]), done.change, done.due)


def _made(rows: list[_Written], shapes: Shapes) -> Iterator[Upserted]:
    """The `Upserted` of each of `rows`, in order, made as it is taken and its row let go (`rows` ends empty)."""
    rows.reverse()
    while rows:
        done = rows.pop()
        yield Upserted(shapes.job(done.row, done.own), done.change, done.due)


class JobsStore(Part):
    """The job rows of one namespace."""

    def upsert_job(self, definition: JobDefinition, now: Instant, *, declared: bool = False) -> Upserted:
        """Insert, replace or keep a job (of this store's namespace); `declared`: as declare() does.

        Raises:
            InvalidJobError: The id belongs to an active job of another namespace.
        """
        body = self._upsert_body(definition, now, declared=declared)
        for _ in range(3):
            try:
                done = self._write_grouped(body, "schedule")
            except IntegrityError:
                # Two first schedules of one id raced (PostgreSQL): the loser
                # now finds the winner's row and decides again.
                continue
            if isinstance(done, str):
                raise self._clash(definition.job_id, done)
            return _upserted(done)
        raise StoreError(self.url, f"schedule of {definition.job_id!r} kept conflicting")

    def declare_jobs(
        self, definitions: Sequence[JobDefinition], now: Instant, *, prune: bool
    ) -> tuple[Iterator[Upserted], list[tuple[str, int]]]:
        """Upsert every definition as declared and, with `prune`, deschedule those left out, in one transaction.

        Only what changed is written, one call per kind of write, no statement binding more
        than `Dialect.max_parameters`.

        Returns:
            Each definition's `Upserted`, in order, made as it is taken, and the (job_id, generation)
            of each job pruned.

        Raises:
            InvalidJobError: An id belongs to an active job of another namespace (nothing written);
                its argument is named as declare() names a spec's, ``specs['<id>'].job_id``.
        """
        ids = [definition.job_id for definition in definitions]
        # Rows are written in job_id order, so overlapping declarations lock them alike and never deadlock.
        order = sorted(range(len(definitions)), key=ids.__getitem__)

        def body(conn: Connection) -> tuple[list[_Written], list[tuple[str, int]], Shapes]:
            # The change counter's row first: its lock orders racing declarations, and every other change
            # of a definition writes it too, so the rows read below stay as they are without locks.
            self.dialect.execute(conn, Sql(self.dialect.locking_sql(_HOLD_CHANGES)))
            held = self._read_jobs(conn, ids)
            # Before the first write: an id another namespace holds refuses the whole declaration.
            self._refuse_clashes(ids, held)
            shapes = Shapes()
            written: list[_Written | None] = [None] * len(definitions)
            writes: list[_Decision] = []  # in job_id order
            for i in order:
                decision = self._decide(conn, definitions[i], now, held.get(ids[i]), declared=True, shapes=shapes)
                if isinstance(decision, str):  # cannot come since the check (the lock): raising rolls all back
                    raise self._clash(ids[i], decision, declared=True)
                written[i] = decision.written
                if decision.kind != "keep":
                    writes.append(decision)
            self._write_decisions(conn, writes)
            pruned = self._prune_declared(conn, set(ids), now) if prune else []
            return cast("list[_Written]", written), pruned, shapes  # each decided

        for _ in range(3):
            try:
                rows, pruned, shapes = self._write(body, "declare")
            except IntegrityError:
                continue  # a first schedule of one of the ids raced ours (as in upsert_job): decide again
            return _made(rows, shapes), pruned
        raise StoreError(self.url, "declare kept conflicting")

    def _ids_per_query(self) -> int:
        """How many ids one ``IN (...)`` binds: under the engine's limit of parameters, with some spare."""
        return min(_IDS_PER_QUERY, self.dialect.max_parameters - _PARAMETERS_SPARE)

    def _read_jobs(self, conn: Connection, job_ids: Sequence[str]) -> dict[str, RawRow]:
        """The rows of `job_ids` that exist (any namespace, any state), raw, by job_id."""
        cursor = self.dialect.cursor(conn)
        step = self._ids_per_query()
        rows: dict[str, RawRow] = {}
        columns = _job_columns(self.dialect)
        for start in range(0, len(job_ids), step):
            which = self.dialect.any_of("job_id", job_ids[start : start + step])
            found = self.dialect.select_many(cursor, columns, Sql(f"{_JOBS_WHERE} {which.text}", which.params))
            rows.update((raw_value(row, "job_id"), row) for row in found)
        return rows

    def _refuse_clashes(self, job_ids: Sequence[str], held: dict[str, RawRow]) -> None:
        """Raise for the first of `job_ids` (in their order) whose row in `held` is another namespace's active job."""
        for job_id in job_ids:
            found = held.get(job_id)
            if found is None or raw_value(found, "state") == DESCHEDULED:
                continue
            if (namespace := raw_value(found, "namespace")) != self.namespace:
                raise self._clash(job_id, str(namespace), declared=True)

    def _write_decisions(self, conn: Connection, decisions: Sequence[_Decision]) -> None:
        """Run the writes of `decisions`, a statement per chunk of rows, each kind's rows in the order given."""
        inserts: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        replaces: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        marked: list[str] = []
        for decision in decisions:
            job_id, values = raw_value(decision.written.row, "job_id"), decision.values
            if decision.kind == "insert" and values is not None:
                inserts.setdefault(tuple(values), []).append(tuple(values.values()))
            elif decision.kind == "replace" and values is not None:
                replaces.setdefault(tuple(values), []).append((*values.values(), job_id))
            elif decision.kind == "mark":
                marked.append(job_id)
        cursor = self.dialect.cursor(conn)
        for names, rows in inserts.items():
            self.dialect.insert_rows(cursor, jobs, names, rows)
        for names, rows in replaces.items():
            # A statement a row: a replacement's arguments may be large, and MariaDB caps a statement's size.
            done = cursor.executemany(_replace_job(names), rows).rowcount
            if done != len(rows):  # cannot happen: no row goes away meanwhile
                raise StoreError(self.url, f"declare: {len(rows) - done} of its rows went away")
        step = self._ids_per_query()
        for start in range(0, len(marked), step):
            which = self.dialect.any_of("job_id", marked[start : start + step])
            cursor.execute(f"{_MARK_DECLARED_WHERE} {which.text}", (True, *which.params))

    def _clash(self, job_id: str, namespace: str, *, declared: bool = False) -> InvalidJobError:
        return InvalidJobError(
            f"specs[{job_id!r}].job_id" if declared else "job_id",
            f"{job_id!r} is a job of namespace {namespace!r} (job ids are unique in a database); "
            f"choose another id, e.g. {self.namespace + '.' + job_id!r}",
        )

    def _upsert_body(
        self, definition: JobDefinition, now: Instant, *, declared: bool
    ) -> Callable[[Connection], _Written | str]:
        """The transaction body of an upsert: what it wrote, or the namespace that holds the id."""
        dialect = self.dialect
        probe = Sql(dialect.locking_sql(_PROBE_JOB), (definition.job_id,))
        find = Sql(_FIND_JOB.format(", ".join(_job_columns(dialect))), (definition.job_id,))

        # The Job is made from the row after the commit, on the caller's thread: the group's
        # transaction, holding SQLite's write lock, need not wait for pydantic.
        def body(conn: Connection) -> _Written | str:  # str: the namespace that holds the id
            # A probe first, holding the row: a new id (the usual schedule()) reads one column, not all.
            known = next(iter(dialect.execute(conn, probe)), None) is not None
            found = next(iter(dialect.execute(conn, find)), None) if known else None
            held = None if found is None else tuple(found)
            decision = self._decide(conn, definition, now, held, declared=declared, shapes=Shapes())
            if isinstance(decision, str):
                return decision  # raised after the (group) commit: see _write_grouped
            write = decision.statement()
            if write is not None:
                done = dialect.execute(conn, write)
                if decision.kind == "replace" and done.rowcount != 1:  # cannot happen: the row is held
                    raise StoreError(self.url, f"schedule of {definition.job_id!r}: its row went away")
            return decision.written

        return body

    def _decide(
        self,
        conn: Connection,
        definition: JobDefinition,
        now: Instant,
        held: RawRow | None,
        *,
        declared: bool,
        shapes: Shapes,
    ) -> _Decision | str:
        """What an upsert of `definition` writes over `held` (raw; None: no row), or the namespace holding the id.

        The row is held, or cannot change meanwhile.
        """
        at = self.dialect.bind_instant
        row = None if held is None else shapes.read(held)  # its own columns: all a decision reads
        if row is not None and row.state != DESCHEDULED and row.namespace != self.namespace:
            return str(row.namespace)
        # A row edited into something unreadable is replaced (`holds`): the way out.
        if held is not None and row is not None and row.state != DESCHEDULED and shapes.holds(held, row, definition):
            if declared and not row.declared:
                return _Decision(_Written(written_over(held, {"declared": True}), "unchanged", None), "mark")
            return _Decision(_Written(held, "unchanged", None, row), "keep")  # keep generation and grid
        policies = definition.policies
        # A generation is never reused, also after deschedule (no ABA); the row is held, so this is the next.
        argument = f"specs[{definition.job_id!r}].job_id" if declared else "job_id"  # as `_clash` names it
        generation = 1 if row is None else _next_generation(conn, row, argument)
        anchor, first = place_grid(policies, now, definition.start_in)
        plan = JobPlan.of(definition.job_id, generation, anchor, policies)
        # A replacement keeps an operator's pause: a re-deploy must not resume a paused job.
        paused = row is not None and row.state != DESCHEDULED and bool(row.paused)
        # Driver values (timestamps by bind_instant, as UTCDateTime stores them: tests/store/test_churn_sql.py).
        values: dict[str, Any] = {
            "target": definition.target,
            "args": definition.args_json,
            "kwargs": definition.kwargs_json,
            **shapes.bound_columns(policies, at),
            "first_run_at": at(anchor),
            "next_run_at": at(first),
            "generation": generation,
            "state": FINISHED if plan.is_over(first) else SCHEDULED,
            "paused": paused,
            # ... with its end and its note.
            "paused_until": at(from_datetime(row.paused_until)) if row and paused and row.paused_until else None,
            "pause_note": row.pause_note if row and paused else None,
            "run_now_at": None,
            "running_for": None,
            "cancel_requested_at": None,
            "retry_attempt": None,  # a replacement drops a pending attempt
            "retry_for": None,
            "owner": None,
            "lease_until": None,
            "run_count": 0,
            "error_count": 0,
            "failure_streak": 0,  # a new generation starts its count of failures in a row afresh
            "last_outcome": None,
            "updated_at": at(now),
            "change_seq": self._bump_change_seq(conn),
            "namespace": self.namespace,
            "declared": declared,
            "owner_bucket": bucket_of(definition.job_id),  # also fills one a hand-written row left NULL
        }
        due = None if values["state"] != SCHEDULED or paused else plan.due_at(first, None, self.jitter_reach)
        # No RETURNING: the row as stored is the one held with these values over it
        # (tests/store/test_churn_sql.py reads it back on every engine).
        if row is None:
            written = {"job_id": definition.job_id, "created_at": at(now), **values}
            return _Decision(_Written(raw_row(written), "created", due), "insert", written)
        if "created_at" in row.problems:  # the replacement is the fix the listing asked for
            values["created_at"] = at(now)
        assert held is not None  # a row was read
        change: Literal["created", "replaced"] = "replaced" if row.state != DESCHEDULED else "created"
        return _Decision(_Written(written_over(held, values), change, due), "replace", values)

    def deschedule_job(self, job_id: str, now: Instant) -> int | None:
        """Mark the job descheduled; return the generation descheduled, None if there was no active job."""

        active = Sql(_ACTIVE_JOB, (job_id, DESCHEDULED, self.namespace))

        def body(conn: Connection) -> int | None:
            rows = self.dialect.update_sql(conn, jobs, self._descheduled(conn, now), active, "generation")
            return generation_of(rows[0].generation) if rows else None

        return self._write_grouped(body, "deschedule")

    def _descheduled(self, conn: Connection, now: Instant) -> Sql:
        """What a deschedule writes (the row stays); the counter is bumped here, as its value is written."""
        return Sql(_DESCHEDULE, (DESCHEDULED, self.dialect.bind_instant(now), self._bump_change_seq(conn)))

    def _prune_declared(self, conn: Connection, keep: Collection[str], now: Instant) -> list[tuple[str, int]]:
        """Deschedule this namespace's declared jobs not in `keep`, by id in chunks; (job_id, generation) of each."""
        declared = Sql(_DECLARED_JOBS, (DESCHEDULED, True, self.namespace))
        # Every id of `keep` is declared by now: if they are all there are, nothing is listed.
        counted = Sql(f"SELECT COUNT(*) FROM persched_jobs WHERE {declared.text}", declared.params)  # noqa: S608 - ours
        if next(iter(self.dialect.execute(conn, counted)))[0] == len(keep):
            return []
        listed = Sql(f"SELECT job_id FROM persched_jobs WHERE {declared.text}", declared.params)  # noqa: S608 - ours
        gone = sorted(job_id for (job_id,) in self.dialect.execute(conn, listed) if job_id not in keep)
        if not gone:
            return []  # nothing to prune: no change to announce
        pruned: list[tuple[str, int]] = []
        step = self._ids_per_query() // 2  # MySQL's update_sql binds the ids it locked again
        for start in range(0, len(gone), step):
            chunk = tuple(gone[start : start + step])
            which = Sql(f"{declared.text} AND job_id IN ({marks(len(chunk))})", declared.params + chunk)
            rows = self.dialect.update_sql(conn, jobs, self._descheduled(conn, now), which, "job_id, generation")
            pruned.extend((row.job_id, int(row.generation)) for row in rows)
        return sorted(pruned)

    def get_job(self, job_id: str) -> Job | None:
        """Return the active job `job_id`, or None."""
        return self.get_job_as(to_job, job_id)

    def get_job_as(self, make: Callable[[StoredRow], T], job_id: str) -> T | None:
        """`get_job`, its row made by `make` (`mappers.to_job`; `plain_job` for the read commands)."""

        def body(conn: Connection) -> T | None:
            row = conn.execute(
                select(*RAW_JOBS).where(jobs.c.job_id == job_id, jobs.c.state != DESCHEDULED, self._mine)
            ).first()
            return None if row is None else make(read_row(JOB_COLUMNS, row._mapping))

        return self._read(body, "get_job")

    def list_jobs(self) -> list[Job]:
        """Return every active job, ordered by next run."""
        return self.list_jobs_as(to_job)

    def list_jobs_as(self, make: Callable[[StoredRow], T]) -> list[T]:
        """`list_jobs`, each row made by `make` (as in `get_job_as`)."""

        def body(conn: Connection) -> list[T]:
            rows = conn.execute(
                select(*RAW_JOBS)
                .where(jobs.c.state != DESCHEDULED, self._mine)
                .order_by(jobs.c.next_run_at, jobs.c.job_id)
            )
            return [make(row) for row in read_rows(JOB_COLUMNS, rows)]

        return self._read(body, "jobs")

    def job_known(self, job_id: str) -> bool:
        """True if `job_id` has a row (active or descheduled) or any recorded run."""

        def body(conn: Connection) -> bool:
            if conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id, self._mine)).first() is not None:
                return True
            known = select(runs.c.run_id).where(runs.c.job_id == job_id, self._in_namespace(runs.c.job_id))
            return conn.execute(known.limit(1)).first() is not None

        return self._read(body, "job lookup")
