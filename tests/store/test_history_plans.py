"""Queries on persched_runs look up each run's job by primary key, at any number of jobs.

Every query on persched_runs is limited to the store's namespace through the
job's row. Written as ``job_id IN (SELECT job_id ... WHERE namespace = ?)``,
SQLite walked every job of the namespace for each query: the heartbeat's
open-runs read took 68 ms at 100,000 idle jobs, 0.56 % of a core at rest
(benchmarks/idle.py; 0.005 ms as a correlated EXISTS). The plans are read with
SQLite's EXPLAIN QUERY PLAN of the very statements the store sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event, select

from persched._model.instant import Instant, micros
from persched._model.models import validate_definition, validate_policies
from persched._store.schema import jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched._store import Store

T = Instant(micros(EPOCH))
JOBS = 2_000
JOBS_PRIMARY_KEY = "sqlite_autoindex_persched_jobs_1"


def _fill(store: Store) -> None:
    """`JOBS` scheduled jobs, copies of one scheduled the usual way."""
    store.upsert_job(validate_definition("j0", "tests.support.jobs:record", validate_policies(1.0), (), {}, 0.0), T)
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(jobs).where(jobs.c.job_id == "j0")).one()._mapping)
        conn.execute(jobs.insert(), [{**row, "job_id": f"j{i}"} for i in range(1, JOBS)])


def _plan_of(store: Store, call: Callable[[], object]) -> str:
    """The query plan of the one statement on persched_runs that `call` sends."""
    sent: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        if "FROM persched_runs" in statement:
            sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        call()
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    assert len(sent) == 1, sent
    statement, params = sent[0]
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
        return "\n".join(" | ".join(str(part) for part in row) for row in cursor.fetchall())
    finally:
        raw.close()


@pytest.mark.parametrize("engine_name", ["sqlite"])  # the plans named here are SQLite's
@pytest.mark.parametrize("query", ["open_runs", "list_runs"])
def test_a_runs_query_looks_up_jobs_by_primary_key(store: Store, query: str) -> None:
    _fill(store)
    plan = _plan_of(store, getattr(store, query))
    assert "SCAN persched_jobs" not in plan, plan  # a walk over the namespace's jobs
    assert JOBS_PRIMARY_KEY in plan, plan
