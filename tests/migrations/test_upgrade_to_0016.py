"""Revision 0016 upgrades in place: ``generation`` of ``persched_jobs`` and ``persched_runs`` becomes
64-bit on PostgreSQL and MariaDB (SQLite's INTEGER already is: the revision leaves it), on every engine.

A database at 0015 keeps its jobs (generation, grid) and runs, and the
indexes over the generation (the runs' one-run-per-slot index); `persched
migrate` upgrades it, and a read-only check refuses it until then.
Downgrading refuses while a generation is past the 32-bit bound, since
lowering one would reuse it.
"""

from __future__ import annotations

import contextlib
import io
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import BigInteger, inspect
from sqlalchemy.exc import IntegrityError

from persched import JobScheduler
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store import revision as _revision
from persched.cli import main as cli_main
from persched.errors import StoreError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql, finished_runs, wait_until
from tests.support.revisions import migrate_to

if TYPE_CHECKING:
    from collections.abc import Mapping

START = 1_700_000_123.456789
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_JOBS = "SELECT job_id, generation, next_run_at, run_count FROM persched_jobs ORDER BY job_id"
_RUNS = "SELECT run_id, job_id, generation, scheduled_for, outcome FROM persched_runs ORDER BY run_id"
_GRID_RUN = (
    "INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, instance_id, run_now)"
    " VALUES ('kept', 2147483648, '2024-01-01 00:00:00.000001', '2024-01-01 00:00:00', 'i', false)"
)


def _shown(index: Mapping[str, Any]) -> str:
    """An index as the inspector reports it, its predicate as text (a TextClause compares by identity)."""
    return repr(
        {
            key: {k: str(v) for k, v in value.items()} if isinstance(value, dict) else value
            for key, value in index.items()
        }
    )


def _schema(url: str) -> tuple[dict[str, bool], dict[str, Any]]:
    """Whether each table's generation is a 64-bit type to SQLAlchemy, and each table's indexes."""
    engine = _db.make_engine(url)
    try:
        insp = inspect(engine)
        tables = ("persched_jobs", "persched_runs")
        wide = {
            table: isinstance(next(c["type"] for c in insp.get_columns(table) if c["name"] == "generation"), BigInteger)
            for table in tables
        }
        indexes = {table: sorted(map(_shown, insp.get_indexes(table))) for table in tables}
        return wide, indexes
    finally:
        engine.dispose()


def _check_at_head(url: str) -> bool:
    """What the read-only commands check: True at head (`check_at_head` raises otherwise, saying why)."""
    engine = _db.make_engine(url)
    try:
        _migrate.check_at_head(engine)
        return _revision.at_head(engine)
    finally:
        engine.dispose()


def _migrate_cli(url: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["--db", url, "migrate"])
    return code, err.getvalue()


def test_a_0015_database_keeps_its_jobs_and_runs_and_gets_64_bit_generations(
    empty_db_url: str, engine_name: str
) -> None:
    url = empty_db_url
    clock = FakeClock(START)
    sched = JobScheduler(url, clock=clock)
    try:
        sched.schedule("kept", jobs.record, 10.0, args=("kept",))  # migrates to head
        sched.schedule("replaced", jobs.record, 10.0, args=("replaced",))
        sched.start()
        clock.advance(10.0)
        wait_until(lambda: all(finished_runs(sched, j) for j in ("kept", "replaced")), message="a run of each")
        sched.schedule("replaced", jobs.record, 20.0, args=("replaced", 2))  # generation 2
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    at_head = _schema(url)

    migrate_to(url, "0015", down=True)
    job_rows, run_rows = db_sql(url, _JOBS), db_sql(url, _RUNS)
    assert [(job_id, generation) for job_id, generation, *_ in job_rows] == [("kept", 1), ("replaced", 2)]
    assert len(run_rows) == 2
    wide, indexes = _schema(url)
    server = engine_name != "sqlite"
    assert wide == {"persched_jobs": False, "persched_runs": False}  # SQLite: INTEGER, as before too
    with pytest.raises(StoreError, match=f"older than '{_migrate.HEAD}'; run `persched migrate`"):
        _check_at_head(url)  # a read-only command refuses it

    assert _migrate_cli(url) == (0, "")
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [(_migrate.HEAD,)]
    assert (db_sql(url, _JOBS), db_sql(url, _RUNS)) == (job_rows, run_rows)
    assert _schema(url) == at_head
    assert at_head[0] == {"persched_jobs": server, "persched_runs": server}
    assert at_head[1]["persched_runs"] == indexes["persched_runs"]  # the same indexes (0017 changed the jobs')
    db_sql(url, _GRID_RUN)  # generation 2**31, one past the old bound, in the slot index (kept)
    with pytest.raises(IntegrityError):
        db_sql(url, _GRID_RUN)

    # 64 bits on every engine now; a downgrade would lower a generation: refused.
    db_sql(url, "UPDATE persched_jobs SET generation = :g WHERE job_id = 'kept'", g=INT64_MAX)
    assert db_sql(url, "SELECT generation FROM persched_jobs WHERE job_id = 'kept'") == [(INT64_MAX,)]
    if server:
        with pytest.raises(RuntimeError, match="job 'kept' has generation 9223372036854775807"):
            migrate_to(url, "0015", down=True)
    assert _check_at_head(url)
