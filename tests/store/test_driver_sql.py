"""The dispatch path's driver SQL binds timestamps exactly as SQLAlchemy's `UTCDateTime` stores them.

The claims compare ``next_run_at <= ?`` and the completions ``running_for = ?``
with values bound raw (`Dialect.bind_instant`); on SQLite the comparison is of
text, so a bound value written differently from the stored one (no
microseconds when they are 0, an offset) would compare wrongly without any
error. Each instant is written by Core and found again by driver SQL, on every engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from unittest import mock

import pytest
from sqlalchemy import Connection, event, select, update
from sqlalchemy.exc import DBAPIError

from persched._model.instant import Instant, Micros, from_datetime, micros, to_datetime
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim
from persched._store.dialects import Sql
from persched._store.schema import jobs
from tests.support import race_jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T = Instant(micros(EPOCH + 0.1234567))

INSTANTS = [
    pytest.param(T, id="odd"),
    pytest.param(Instant(micros(EPOCH)), id="whole-second"),  # microseconds 0: still written
    pytest.param(Instant(T + 999_999), id="last-microsecond"),
    pytest.param(Instant(micros(946_684_799.999999)), id="before-2000"),
]


@pytest.mark.parametrize("instant", INSTANTS)
def test_a_bound_instant_finds_the_value_core_stored(store: Store, instant: Instant) -> None:
    store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    at = store.dialect.bind_instant
    with store.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.job_id == "a").values(next_run_at=to_datetime(instant)))
        raw = conn.execute(select(jobs.c.next_run_at).where(jobs.c.job_id == "a")).scalar_one()
        find = "SELECT job_id FROM persched_jobs WHERE next_run_at = ? AND next_run_at <= ? AND next_run_at > ?"
        found = store.dialect.execute(conn, Sql(find, (at(instant), at(instant), at(Instant(instant - 1)))))
        assert [row.job_id for row in found] == ["a"]
    assert raw == to_datetime(instant)


def test_a_driver_error_on_the_driver_cursor_is_raised_as_sqlalchemy_raises_it(store: Store) -> None:
    with store.engine.connect() as conn:
        cur = store.dialect.cursor(conn)
        with pytest.raises(DBAPIError) as caught:
            cur.execute("SELECT no_such_column FROM persched_jobs")
        assert "no_such_column" in str(caught.value)  # the statement, as SQLAlchemy shows it
        assert isinstance(caught.value.orig, conn.dialect.loaded_dbapi.Error)
        assert not caught.value.connection_invalidated  # a statement's error: the connection stays
        assert not conn.invalidated


def test_a_connection_gone_under_the_driver_cursor_is_invalidated(store: Store) -> None:
    with store.engine.connect() as conn:
        cur = store.dialect.cursor(conn)
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.close()  # as a server that went away leaves it
        with pytest.raises(DBAPIError) as caught:
            cur.executemany("UPDATE persched_jobs SET paused = ? WHERE job_id = ?", [(True, "a"), (True, "b")])
        assert caught.value.connection_invalidated  # what `Dialect.is_transient` retries on
        assert conn.invalidated  # never handed out again


def test_a_statement_of_the_store_returns_named_rows_and_its_rowcount(store: Store) -> None:
    """`Dialect.execute` runs on the driver's cursor: its rows are read by position, by attribute and
    by name (as SQLAlchemy's `Row`), a write says how many rows it changed, and a connection not in a
    transaction begins one first, as SQLAlchemy's own execute does."""
    store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    with store.engine.connect() as conn:
        found = store.dialect.execute(
            conn, Sql("SELECT job_id, generation AS gen FROM persched_jobs WHERE job_id = ?", ("a",))
        )
        assert conn.in_transaction()
        (row,) = found
        assert (row[0], row.job_id, row.gen, row._mapping) == ("a", "a", 1, {"job_id": "a", "gen": 1})
        changed = store.dialect.execute(conn, Sql("UPDATE persched_jobs SET paused = ? WHERE job_id <> ?", (False, "")))
        assert (changed.rowcount, changed.fetchall()) == (1, [])
        conn.rollback()


def test_a_statement_without_parameters_keeps_a_literal_percent(store: Store) -> None:
    """Sent without parameters, as SQLAlchemy sends it: PyMySQL and psycopg read ``%`` as a
    placeholder only in a statement that has parameters."""
    with store.engine.begin() as conn:
        (row,) = store.dialect.execute(conn, Sql("SELECT '100%' AS share"))
        assert row.share == "100%"


def test_schedule_and_deschedule_make_no_sqlalchemy_result(store: Store) -> None:
    """Every statement of schedule() and deschedule(), the SQLite BEGIN IMMEDIATE too, runs on the
    driver's cursor, never through SQLAlchemy's ``exec_driver_sql`` (its result costs several times the
    statement); the cursor listeners still see each statement."""
    statements: list[str] = []

    def cursor(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    definition = validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
    event.listen(store.engine, "before_cursor_execute", cursor)
    try:
        with mock.patch.object(
            Connection, "exec_driver_sql", autospec=True, side_effect=Connection.exec_driver_sql
        ) as sa:
            store.upsert_job(definition, T)  # created
            store.upsert_job(definition, T)  # unchanged
            store.deschedule_job("a", T)
    finally:
        event.remove(store.engine, "before_cursor_execute", cursor)
    assert sa.call_args_list == []
    assert len(statements) >= 6, statements


def test_a_claim_writes_back_every_won_row_when_they_take_several_statements(store: Store) -> None:
    """SQLite writes the won rows back from one VALUES list per statement, as many rows as its
    parameter limit takes: a limit of two rows a statement still writes all five, each its own."""
    ids = [f"j{i}" for i in range(5)]
    for job_id in ids:
        job, _, _ = store.upsert_job(
            validate_definition(job_id, race_jobs.RECORD, validate_policies(10.0), (), {}, None), T
        )
    slot = from_datetime(job.next_run_at)  # every job's first slot: the same
    entries = [(job_id, 1, slot, slot) for job_id in ids]
    with mock.patch.object(type(store.dialect), "max_parameters", 23):  # the write back binds 11 values a row
        results = store.claim_runs(entries, Instant(slot + 5), "me:1:aaaaaa", Micros(30_000_000))
    assert [type(result) for result in results] == [Claim] * 5
    with store.engine.connect() as conn:
        rows = conn.execute(select(jobs.c.job_id, jobs.c.state, jobs.c.owner, jobs.c.running_for)).all()
    assert sorted(rows) == [(job_id, "running", "me:1:aaaaaa", to_datetime(slot)) for job_id in ids]
