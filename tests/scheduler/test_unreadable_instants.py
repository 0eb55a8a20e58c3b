"""An instant edited by hand into something that is none costs only its own job, on the engines that
let one in: SQLite's text, and MariaDB's zero dates (a session without NO_ZERO_DATE stores
'0000-00-00', which PyMySQL gives as text, and which `declare()` reads as ``CAST(… AS CHAR)``).

`jobs()` lists the row as unreadable beside the others, and `declare()` replaces it by its spec
(tests/scheduler/test_corrupt_rows.py and test_declare_changes.py, for other columns and engines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from persched import JobSpec
from persched.testing import FakeClock

if TYPE_CHECKING:
    from persched import JobScheduler

TARGET: Final = "tests.support.jobs:record"
COLUMNS: Final = ("next_run_at", "first_run_at", "created_at", "updated_at")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_700_000_123.456789)


def _edit(url: str, column: str) -> None:
    """Make `column` of job "bad" an instant no reader takes: garbage text, or a zero date."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "sqlite":
                value = "'garbage'"
            else:
                conn.execute(text("SET SESSION sql_mode = ''"))
                value = "'0000-00-00 00:00:00'"
            conn.execute(text(f"UPDATE persched_jobs SET {column} = {value} WHERE job_id = 'bad'"))  # noqa: S608
    finally:
        engine.dispose()


@pytest.mark.parametrize("engine_name", ["sqlite", "mariadb"], indirect=True)
@pytest.mark.parametrize("column", COLUMNS)
def test_an_instant_that_is_none_is_listed_unreadable_and_replaced_by_its_spec(
    db_url: str, app: JobScheduler, column: str
) -> None:
    specs = [JobSpec(job_id, TARGET, 60.0) for job_id in ("good", "bad", "other")]
    app.declare(specs)
    _edit(db_url, column)
    listed = {job.job_id: job for job in app.jobs()}
    assert set(listed) == {"good", "bad", "other"}
    assert listed["bad"].unreadable is not None
    assert column in listed["bad"].unreadable
    assert {job_id for job_id, job in listed.items() if job.unreadable is None} == {"good", "other"}
    done = app.declare(specs)
    assert (done.replaced, sorted(done.unchanged)) == (("bad",), ["good", "other"])
    again = {job.job_id: job for job in app.jobs()}
    assert again["bad"].unreadable is None
    assert again["bad"].generation == listed["bad"].generation + 1
