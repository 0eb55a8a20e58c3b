"""`Dialect.update_each` writes each parameter row into its own table row, as an executemany does.

MariaDB's is one UPDATE joined to a derived table of the rows' values (persched/_store/dialects/mysql.py):
its key comparison (the connection's collation against the column's), its columns' types (a derived
table's are those of its rows together) and its size (the server's max_allowed_packet) are the
server's, not the driver's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import func, select

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._store import Claim, Completion
from persched._store.schema import jobs, runs
from tests.support.helpers import EPOCH
from tests.support.store_calls import schedule_each

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(EPOCH + 0.1234567))
LEASE: Final = Micros(30_000_000)
KEY: Final = ("job_id", "generation")

# Ids that one collation or another takes for the same: case, a trailing space (PAD SPACE), an accent,
# two characters outside the BMP (utf8mb4_general_ci weighs them alike), "ß" and "ss", quotes and
# placeholders of either parameter style.
ODD_IDS: Final = ("a", "A", "a ", "ä", "\U0001f600", "\U0001f601", "ß", "ss", "it's?", "back\\slash", "%s", "?")


def test_each_row_is_written_by_its_own_id_whatever_a_collation_would_match(store: Store) -> None:
    schedule_each(store, ODD_IDS, T)
    rows = [(f"owner of {job_id!r}", job_id, 1) for job_id in ODD_IDS]
    with store.engine.begin() as conn:
        written = store.dialect.update_rows(store.dialect.cursor(conn), jobs, ("owner",), KEY, rows)
    with store.engine.connect() as conn:
        found = dict(conn.execute(select(jobs.c.job_id, jobs.c.owner)).all())
    assert found == {job_id: f"owner of {job_id!r}" for job_id in ODD_IDS}
    assert written == len(ODD_IDS)


@pytest.mark.parametrize("null_first", [True, False], ids=["null-first", "null-later"])
def test_nulls_beside_instants_and_numbers_are_written_as_null(store: Store, null_first: bool) -> None:
    """The first row's NULL does not make the column of the rows' values a NULL or text one."""
    ids = tuple(f"j{i}" for i in range(4))
    schedule_each(store, ids, T)
    values: list[tuple[Instant | None, int | None]] = [(None, None), (Instant(T + 7), 3), (None, None)]
    values.append((Instant(T + 1_000_001), 12))
    if not null_first:
        values.reverse()
    at = store.dialect.bind_instant
    rows = [(None if slot is None else at(slot), n, job_id, 1) for (slot, n), job_id in zip(values, ids, strict=True)]
    with store.engine.begin() as conn:
        written = store.dialect.update_rows(store.dialect.cursor(conn), jobs, ("retry_for", "retry_attempt"), KEY, rows)
    with store.engine.connect() as conn:
        found = conn.execute(select(jobs.c.retry_for, jobs.c.retry_attempt).order_by(jobs.c.job_id)).all()
    assert [(None if slot is None else from_datetime(slot), n) for slot, n in found] == values
    assert written == len(ids)


def test_a_cycles_completions_past_the_servers_packet_are_still_written(store: Store) -> None:
    """MariaDB takes a statement of at most max_allowed_packet (16 MiB by default): a cycle of 720
    failed runs whose errors are 8,000 characters of CJK text (24 kB each: 17 MB in all, as a backlog
    of outcomes kept through an outage makes) is written in statements under it. In one statement,
    the server closed the connection, an error taken as transient: retried with the same outcomes for
    ever, and every dispatch cycle of the instance with them."""
    ids = tuple(f"j{i}" for i in range(720))
    schedule_each(store, ids, T)
    with store.engine.connect() as conn:
        slots = [
            (job_id, gen, from_datetime(at))
            for job_id, gen, at in conn.execute(select(jobs.c.job_id, jobs.c.generation, jobs.c.next_run_at))
        ]
    now = max(slot for _, _, slot in slots)
    claims = [c for c in store.claim_runs([(*s, now) for s in slots], now, "me", LEASE) if isinstance(c, Claim)]
    assert len(claims) == len(ids)
    error = "数据库连接失败" * 1_200  # 8,400 characters: cut to MAX_ERROR_TEXT, 3 bytes each
    done = Instant(now + 1_500_000)
    due = store.finish_runs([Completion(c, "error", f"{c.job_id}: {error}", done) for c in claims], "me")
    assert len(due) == len(ids)
    assert None not in due
    with store.engine.connect() as conn:
        outcomes = conn.execute(select(runs.c.outcome, func.count()).group_by(runs.c.outcome)).all()
    assert outcomes == [("error", len(ids))]


@pytest.mark.parametrize("fraction", [0, 123_456], ids=["whole-seconds", "odd"])
def test_a_where_on_instants_bound_per_row_matches_the_stored_instants(store: Store, fraction: int) -> None:
    """PyMySQL writes an instant without its fraction when it has none ('… 12:00:00'): compared as text
    with the stored DATETIME(6) ('… 12:00:00.000000') it would never match; the rows' values must
    compare as instants. Slots on whole seconds are the common case (an interval of whole seconds
    from a whole second)."""
    ids = tuple(f"j{i}" for i in range(3))
    schedule_each(store, ids, T)
    at = store.dialect.bind_instant
    slots = [Instant(micros(EPOCH + 60 * i) + fraction) for i in range(len(ids))]
    with store.engine.begin() as conn:
        cur = store.dialect.cursor(conn)
        store.dialect.update_rows(
            cur, jobs, ("running_for",), KEY, [(at(s), j, 1) for s, j in zip(slots, ids, strict=True)]
        )
    sql = "UPDATE persched_jobs SET owner = ? WHERE job_id = ? AND running_for = ?"
    with store.engine.begin() as conn:
        rows = [(f"o{j}", j, at(s)) for s, j in zip(slots, ids, strict=True)]
        written = store.dialect.update_each(store.dialect.cursor(conn), sql, rows)
    with store.engine.connect() as conn:
        owners = conn.execute(select(jobs.c.owner).order_by(jobs.c.job_id)).scalars().all()
    assert owners == [f"o{j}" for j in ids]
    assert written == len(ids)


def test_a_cycle_of_odd_ids_claims_and_completes_each_job_alone(store: Store) -> None:
    """The whole dispatch path (the claim's locking read and write back, the completions, an array of
    ids on PostgreSQL, the joined UPDATEs on MariaDB) with ids that a collation could take for one
    another: each job is claimed once, its run recorded on its own row, its next slot its own."""
    schedule_each(store, ODD_IDS, T)
    with store.engine.connect() as conn:
        found = conn.execute(select(jobs.c.job_id, jobs.c.generation, jobs.c.next_run_at)).all()
    slots = [(job_id, gen, from_datetime(at)) for job_id, gen, at in found]
    now = max(slot for _, _, slot in slots)
    claims = [c for c in store.claim_runs([(*s, now) for s in slots], now, "me", LEASE) if isinstance(c, Claim)]
    assert sorted(c.job_id for c in claims) == sorted(ODD_IDS)
    done = Instant(now + 1_500_000)
    outcomes = {job_id: ("error" if i % 2 else "ok") for i, job_id in enumerate(ODD_IDS)}
    due = store.finish_runs([Completion(c, outcomes[c.job_id], c.job_id, done) for c in claims], "me")
    assert due == [Instant(c.scheduled_for + micros(10.0)) for c in claims]
    with store.engine.connect() as conn:
        recorded = conn.execute(select(runs.c.job_id, runs.c.outcome, runs.c.error)).all()
        rows = conn.execute(select(jobs.c.job_id, jobs.c.state, jobs.c.run_count, jobs.c.last_outcome)).all()
    assert sorted(recorded) == sorted((job_id, outcome, job_id) for job_id, outcome in outcomes.items())
    assert sorted(rows) == sorted((job_id, "scheduled", 1, outcome) for job_id, outcome in outcomes.items())
