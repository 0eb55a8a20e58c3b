"""The claim finds its batch's rows by primary key, at any table size.

A claim names at most a batch of job ids; if the planner took the
``(state, next_run_at)`` index instead, each claim would walk every scheduled
row (16 ms per claim at 100,000 jobs on SQLite, measured). The plan is read
with the engine's own EXPLAIN of the very statement the store sends.

PostgreSQL is also checked before ANALYZE, the state of a table just filled
until autovacuum gets to it: its planner then guessed one row per condition,
took the state index and re-ran the locking read once per row claimed (5.6 ms
per claim of 32 at 2,000 jobs, measured in `benchmarks.multi_instance`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import event, select, text

from persched._model.instant import Instant, Micros, micros
from persched._model.models import validate_definition, validate_policies
from persched._store.schema import jobs
from tests.support.engines import engine_params
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T = Instant(micros(EPOCH))
JOBS = 3_000


def _fill(store: Store, *, analyze: bool = True) -> None:
    """`JOBS` scheduled jobs, copies of one scheduled the usual way."""
    store.upsert_job(validate_definition("j0", "tests.support.jobs:record", validate_policies(1.0), (), {}, 0.0), T)
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(jobs).where(jobs.c.job_id == "j0")).one()._mapping)
        conn.execute(jobs.insert(), [{**row, "job_id": f"j{i}"} for i in range(1, JOBS)])
        if store.engine.dialect.name == "postgresql" and analyze:
            conn.execute(text("ANALYZE persched_jobs"))


def _claim_plan(store: Store, explain: str | None = None) -> str:
    sent: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        claim = "CASE" in statement or "array_position" in statement  # lists and CASE chains, or arrays
        if statement.startswith("SELECT") and claim and not many:  # the claim's locking read
            sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        due = Instant(T + 1_000_000)
        entries = [(f"j{i}", 1, due, due) for i in range(0, JOBS, JOBS // 8)]
        results = store.claim_runs(entries, due, "me", Micros(30_000_000))
        assert [type(result).__name__ for result in results] == ["Claim"] * len(entries)
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    # MySQL: the plain read and the locking one (dialects/mysql.py), each plan's lines in turn.
    statements = sent[:2] if store.engine.dialect.name == "mysql" else sent[:1]
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if explain is not None:  # EXPLAIN ANALYZE runs the locking read: its rows waiting again, as they were
            cursor.execute(
                "UPDATE persched_jobs SET state = 'scheduled', next_run_at = running_for WHERE state = 'running'"
            )
        else:
            explain = "EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN "
        lines = []
        for statement, params in statements:
            cursor.execute(explain + statement, params)
            lines += [" | ".join(str(part) for part in row) for row in cursor.fetchall()]
        return "\n".join(lines)
    finally:
        raw.rollback()
        raw.close()


def test_the_claim_finds_its_rows_by_primary_key(store: Store) -> None:
    _fill(store)
    plan = _claim_plan(store)
    if store.engine.dialect.name == "sqlite":
        assert "sqlite_autoindex_persched_jobs_1" in plan, plan  # the primary key of persched_jobs
    elif store.engine.dialect.name == "mysql":
        # EXPLAIN's columns: id | select_type | table | type | possible_keys | key | ...
        keys = [line.split(" | ")[5] for line in plan.splitlines()]
        assert len(keys) == 2, plan
        assert keys == ["PRIMARY", "PRIMARY"], plan  # (possible_keys may name the other index: not taken)
        return
    else:
        assert re.search(r"Index Scan (using|on) pk_persched_jobs", plan), plan
    assert "state_next_run_at" not in plan, plan


@pytest.mark.parametrize("engine_name", engine_params("postgres"), indirect=True)
def test_before_analyze_the_postgresql_claim_locks_its_rows_in_one_read(store: Store) -> None:
    _fill(store, analyze=False)
    # ANALYZE here is EXPLAIN's: the claim runs (rolled back) and each node reports its loops.
    plan = _claim_plan(store, "EXPLAIN (ANALYZE, COSTS OFF) ")
    assert "state_next_run_at" not in plan, plan
    locks = [line for line in plan.splitlines() if "LockRows" in line]
    assert len(locks) == 1, plan
    assert "loops=1)" in locks[0], plan


@pytest.mark.parametrize("engine_name", engine_params("postgres"), indirect=True)
def test_the_postgresql_claim_sends_one_text_whatever_the_batch_size(store: Store) -> None:
    # Arrays, not lists: the server plans the text once per connection (a prepared statement),
    # where a text per batch size was planned at every claim.
    _fill(store)
    sent: set[str] = set()

    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        if statement.startswith(("SELECT", "INSERT INTO persched_runs")) and not many:
            sent.add(statement)

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        for size, start in ((1, 1), (7, 10), (32, 100)):
            due = Instant(T + 1_000_000)
            entries = [(f"j{i}", 1, due, due) for i in range(start, start + size)]
            results = store.claim_runs(entries, due, "me", Micros(30_000_000))
            assert [type(result).__name__ for result in results] == ["Claim"] * size
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    assert len([s for s in sent if "SKIP LOCKED" in s]) == 1, sent
    assert len([s for s in sent if s.startswith("INSERT")]) == 1, sent


@pytest.mark.parametrize("engine_name", engine_params("postgres"), indirect=True)
def test_the_search_probe_walks_the_index_when_the_statistics_are_stale(store: Store) -> None:
    """The search's probe (one row overdue?) on statistics from before the rows moved on: the planner
    expected most rows to match, and a bare LIMIT 1 was a sequential scan of the whole table when none
    did (what every idle instance asks every 0.5 s)."""
    _fill(store)  # analyzed with every row due at T + 1 s
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE persched_jobs SET next_run_at = next_run_at + interval '1 hour'"))
    sent: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:  # noqa: ANN401
        if statement.startswith("SELECT persched_jobs.job_id") and "LIMIT" in statement:
            sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        now = Instant(T + 60_000_000)
        overdue = store.claim_overdue(8, now, now, "me", Micros(30_000_000))
        assert overdue.entries == []  # nothing overdue: the probe alone
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    assert len(sent) == 1, sent
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("EXPLAIN " + sent[0][0], sent[0][1])
        plan = "\n".join(str(row[0]) for row in cursor.fetchall())
    finally:
        raw.rollback()
        raw.close()
    assert "Seq Scan" not in plan, plan
    assert "state_next_run_at" in plan, plan
