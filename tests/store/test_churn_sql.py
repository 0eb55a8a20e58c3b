"""schedule() and deschedule() in driver SQL write what SQLAlchemy Core would have written.

`JobsStore.upsert_job`, `deschedule_job` and the change counter's bump bind
timestamps raw (`Dialect.bind_instant`) and build the row they return from
the driver values they wrote, without RETURNING. On SQLite an instant is
text compared as text, so a value written differently from what Core writes
(no microseconds when they are 0, an offset) would compare wrongly without
any error. Each job written here is read back through the old readers, on
every engine: Core's typed columns (`UTCDateTime`), Core's equality
predicates, the raw read of `get_job`; and a copy written by Core must hold
the same raw values column by column.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event, select, update

from persched._model.instant import Instant, from_datetime, micros, to_datetime
from persched._model.models import validate_definition, validate_policies
from persched._model.policy import place_grid
from persched._store.dialects import Sql
from persched._store.dialects.sqlite import SQLiteDialect
from persched._store.schema import changes, jobs
from tests.support import race_jobs

if TYPE_CHECKING:
    from sqlalchemy import Column, ColumnElement, Connection

    from persched import Job
    from persched._model.models import JobDefinition
    from persched._store import Store

ODD = Instant(1_700_000_000_123_457)  # 1_700_000_000.123457 s

INSTANTS = [
    pytest.param(ODD, id="odd"),
    pytest.param(Instant(1_700_000_000_000_000), id="whole-second"),  # microseconds 0: still written
    pytest.param(Instant(1_700_000_000_999_999), id="last-microsecond"),
    pytest.param(Instant(micros(946_684_799.999999)), id="before-2000"),
]


def _definition(job_id: str, now: Instant, *, args: tuple[Any, ...] = ("a",), interval: float = 10.0) -> JobDefinition:
    """A job whose window's instants are odd too (start_at anchors the grid, end_at closes it)."""
    start_at = to_datetime(now) + timedelta(seconds=0.5, microseconds=3)
    end_at = to_datetime(now) + timedelta(days=1, microseconds=7)
    policies = validate_policies(interval, start_at=start_at, end_at=end_at, jitter_seconds=0.25)
    return validate_definition(job_id, race_jobs.RECORD, policies, args, {"k": [1, 2]}, None)


def _raw(store: Store, conn: Connection, job_id: str) -> dict[str, Any]:
    """The driver's values of a job's row, every column but job_id."""
    names = ", ".join(column.name for column in jobs.c)
    find = Sql(f"SELECT {names} FROM persched_jobs WHERE job_id = ?", (job_id,))  # noqa: S608 - a test's own SQL
    (row,) = store.dialect.execute(conn, find)
    return {name: value for name, value in row._mapping.items() if name != "job_id"}


def _core_copy_matches(store: Store, conn: Connection, job_id: str) -> dict[str, Any]:
    """Read the row with Core's types, write it again with Core as another job, and compare the
    driver values of both, column by column; return the typed row."""
    typed: dict[str, Any] = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).one()._asdict()
    conn.execute(jobs.insert().values({**typed, "job_id": "core-copy"}))
    assert _raw(store, conn, "core-copy") == _raw(store, conn, job_id)
    conn.execute(jobs.delete().where(jobs.c.job_id == "core-copy"))
    return typed


def _equals(name: str, instant: Instant) -> ColumnElement[bool]:
    column: Column[Any] = jobs.c[name]
    return column == to_datetime(instant)


def _reads_back(store: Store, job: Job, now: Instant, definition: JobDefinition, *, generation: int) -> None:
    """`job`, just returned by upsert_job at `now`, is what every old reader reads of its row."""
    assert store.get_job(job.job_id) == job  # the raw read of RAW_JOBS and read_row
    anchor, first = place_grid(definition.policies, now, definition.start_in)
    start_at, end_at = definition.policies.start_at, definition.policies.end_at
    assert start_at is not None
    assert end_at is not None
    expected = {
        "start_at": start_at,
        "end_at": end_at,
        "first_run_at": anchor,
        "next_run_at": first,
        "updated_at": now,
    }
    with store.engine.begin() as conn:
        typed = _core_copy_matches(store, conn, job.job_id)  # UTCDateTime's reads, and a copy written by Core
        for name, instant in expected.items():
            assert typed[name] == to_datetime(instant), name
        assert from_datetime(typed["next_run_at"]) == from_datetime(job.next_run_at)
        assert (typed["generation"], typed["state"], typed["paused"], typed["declared"]) == (
            generation,
            "scheduled",
            False,
            False,
        )
        assert typed["change_seq"] == conn.execute(select(changes.c.seq)).scalar_one()
        # Core's own predicates (text comparisons on SQLite) find each value as written.
        found = conn.execute(
            select(jobs.c.job_id).where(
                *(_equals(name, instant) for name, instant in expected.items()),
                jobs.c.created_at == job.created_at,
                jobs.c.next_run_at > to_datetime(Instant(first - 1)),
                jobs.c.next_run_at < to_datetime(Instant(first + 1)),
            )
        ).scalars()
        assert list(found) == [job.job_id]


@pytest.mark.parametrize("now", INSTANTS)
def test_a_created_job_reads_back_as_core_wrote_it(store: Store, now: Instant) -> None:
    definition = _definition("a", now)
    job, change, _ = store.upsert_job(definition, now)
    assert change == "created"
    assert job.created_at == to_datetime(now)
    _reads_back(store, job, now, definition, generation=1)


@pytest.mark.parametrize("now", INSTANTS)
def test_a_replaced_job_reads_back_as_core_wrote_it(store: Store, now: Instant) -> None:
    first, _, _ = store.upsert_job(_definition("a", ODD, interval=30.0), ODD)
    definition = _definition("a", now, args=("b",))
    job, change, _ = store.upsert_job(definition, now)
    assert change == "replaced"
    assert job.created_at == first.created_at  # kept by a replacement
    _reads_back(store, job, now, definition, generation=2)


@pytest.mark.parametrize("now", INSTANTS)
def test_a_descheduled_job_reads_back_as_core_wrote_it_and_its_generation_goes_on(store: Store, now: Instant) -> None:
    store.upsert_job(_definition("a", ODD), ODD)
    assert store.deschedule_job("a", now) == 1
    with store.engine.begin() as conn:
        typed = _core_copy_matches(store, conn, "a")
        assert (typed["state"], typed["owner"], typed["lease_until"]) == ("descheduled", None, None)
        assert typed["updated_at"] == to_datetime(now)
        assert typed["change_seq"] == conn.execute(select(changes.c.seq)).scalar_one()
        found = conn.execute(select(jobs.c.job_id).where(jobs.c.updated_at == to_datetime(now))).scalars()
        assert list(found) == ["a"]
    assert store.deschedule_job("a", now) is None  # nothing active any more
    # Scheduled again: a new generation (no ABA), created anew, read back as Core reads it.
    definition = _definition("a", now)
    job, change, _ = store.upsert_job(definition, now)
    assert (change, job.generation) == ("created", 2)
    _reads_back(store, job, now, definition, generation=2)


def test_an_unchanged_job_keeps_its_row_and_a_declare_marks_it(store: Store) -> None:
    definition = _definition("a", ODD)
    job, _, _ = store.upsert_job(definition, ODD)
    later = Instant(ODD + 7_000_001)
    again, change, due = store.upsert_job(definition, later)  # same generation, same grid
    assert (change, due, again) == ("unchanged", None, job)
    declared, change, _ = store.upsert_job(definition, later, declared=True)
    assert change == "unchanged"
    assert declared == job.model_copy(update={"declared": True})
    assert store.get_job("a") == declared


def test_a_row_edited_into_something_unreadable_is_replaced_and_reads_back(store: Store, engine_name: str) -> None:
    definition = _definition("a", ODD)
    store.upsert_job(definition, ODD)
    with store.engine.begin() as conn:
        if engine_name == "sqlite":  # type affinity lets a hand edit put text into a timestamp
            conn.exec_driver_sql("UPDATE persched_jobs SET next_run_at = 'garbage', created_at = 'soon'")
        else:
            conn.execute(update(jobs).values(interval_seconds=-1.0))  # typed columns: a schedule none can run
    job = store.get_job("a")
    assert job is not None
    assert job.schedule.startswith("unreadable")
    now = Instant(ODD + 1_000_001)
    replaced, change, _ = store.upsert_job(definition, now)  # the same definition: the way out
    assert (change, replaced.generation, replaced.unreadable) == ("replaced", 2, None)
    if engine_name == "sqlite":
        assert replaced.created_at == to_datetime(now)  # the unreadable one is written anew
    _reads_back(store, replaced, now, definition, generation=2)


def test_schedule_and_deschedule_build_no_sqlalchemy_statement(store: Store) -> None:
    """The churn path runs driver SQL only: per call, Core's construction and cache keys cost
    more than the database's work."""
    constructs: list[object] = []  # what Core executed (driver SQL does not reach before_execute)
    statements: list[str] = []  # everything sent to the database

    def core(conn: object, statement: object, *args: object) -> None:
        if not isinstance(statement, str):
            constructs.append(statement)

    def cursor(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_execute", core)
    event.listen(store.engine, "before_cursor_execute", cursor)
    try:
        store.upsert_job(_definition("a", ODD), ODD)  # created
        store.upsert_job(_definition("a", ODD), ODD)  # unchanged
        store.upsert_job(_definition("a", ODD), ODD, declared=True)  # unchanged, marked declared
        store.upsert_job(_definition("a", ODD, args=("b",)), ODD)  # replaced
        store.deschedule_job("a", ODD)
        store.deschedule_job("a", ODD)  # nothing to deschedule
        store.upsert_job(_definition("a", ODD), ODD)  # created again, after deschedule
    finally:
        event.remove(store.engine, "before_execute", core)
        event.remove(store.engine, "before_cursor_execute", cursor)
    assert len(statements) >= 14, statements
    assert constructs == []


def _bind_without_zero_microseconds(self: SQLiteDialect, at: Instant) -> object:
    """A broken `SQLiteDialect.bind_instant`: Python's default isoformat leaves ".000000" out."""
    return to_datetime(at).replace(tzinfo=None).isoformat(" ")


@pytest.mark.parametrize("engine_name", ["sqlite"])  # text timestamps are SQLite's
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a whole-second instant is written as other text")
def test_broken_whole_second_bind_is_caught(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above, against a bind that writes a whole-second instant without its ".000000"."""
    monkeypatch.setattr(SQLiteDialect, "bind_instant", _bind_without_zero_microseconds)
    now = Instant(1_700_000_000_000_000)
    definition = _definition("a", now)
    job, _, _ = store.upsert_job(definition, now)
    _reads_back(store, job, now, definition, generation=1)
