"""The claim finds its batch's rows by primary key, at any table size (issue 14).

A claim names at most a batch of job ids; if the planner took the
``(state, next_run_at)`` index instead, each claim would walk every scheduled
row (16 ms per claim at 100,000 jobs on SQLite, measured). The plan is read
with the engine's own EXPLAIN of the very statement the store sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import event, select, text

from persched._instant import Instant, Micros, micros
from persched._models import validate_definition, validate_policies
from persched._schema import jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T = Instant(micros(EPOCH))
JOBS = 3_000


def _fill(store: Store) -> None:
    """`JOBS` scheduled jobs, copies of one scheduled the usual way."""
    store.upsert_job(validate_definition("j0", "tests.support.jobs:record", validate_policies(1.0), (), {}, 0.0), T)
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(jobs).where(jobs.c.job_id == "j0")).one()._mapping)
        conn.execute(jobs.insert(), [{**row, "job_id": f"j{i}"} for i in range(1, JOBS)])
        if store.engine.dialect.name == "postgresql":
            conn.execute(text("ANALYZE persched_jobs"))


def _claim_plan(store: Store) -> str:
    sent: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        if statement.startswith("UPDATE persched_jobs") and "CASE" in statement and not many:  # the claim
            sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        due = Instant(T + 1_000_000)
        entries = [(f"j{i}", 1, due, due) for i in range(0, JOBS, JOBS // 8)]
        results = store.claim_runs(entries, due, "me", Micros(30_000_000))
        assert [type(result).__name__ for result in results] == ["Claim"] * len(entries)
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    (statement, params), *_ = sent
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(
            ("EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN ") + statement, params
        )
        return "\n".join(" | ".join(str(part) for part in row) for row in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()


def test_the_claim_finds_its_rows_by_primary_key(store: Store) -> None:
    _fill(store)
    plan = _claim_plan(store)
    if store.engine.dialect.name == "sqlite":
        assert "sqlite_autoindex_persched_jobs_1" in plan, plan  # the primary key of persched_jobs
    else:
        assert "Index Scan on pk_persched_jobs" in plan, plan
    assert "state_next_run_at" not in plan, plan
