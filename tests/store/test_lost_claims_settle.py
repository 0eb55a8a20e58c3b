"""A claim that loses on a waiting row it cannot read settles that job (`ClaimsStore._settle_unreadable`).

An entry whose slot is before the row's (a stale one) loses its claim; when the row it then finds
cannot be read, that entry may have been the job's last, so the job is paused with an "error" record
saying why, as a won claim's read does (tests/scheduler/test_corrupt_rows.py, on SQLite). Here: on
every engine, a row whose stored schedule cannot be read (each column of the right type, its value
refused), a row another transaction holds meanwhile (an operator's fix under way), a pause flag that
is no flag, and a generation that is no number (never matched: dropped, not looked at again).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import ClaimMiss
from persched._store.schema import runs
from tests.support import race_jobs
from tests.support.helpers import EPOCH, TIMEOUT
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(EPOCH + 0.1234567))
LEASE: Final = Micros(30_000_000)


def _scheduled(store: Store) -> tuple[int, Instant]:
    """Job "bad" every 10 s from T: its generation and first slot."""
    job, _, _ = store.upsert_job(validate_definition("bad", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    return job.generation, from_datetime(job.next_run_at)


def _edit(store: Store, assignment: str) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE persched_jobs SET {assignment} WHERE job_id = 'bad'")  # noqa: S608 - test data


def _stands(store: Store) -> tuple[object, list[tuple[str | None, str | None]]]:
    """Job "bad"'s `paused` as stored (1 or True once paused; what was edited in, else) and its records."""
    with store.engine.connect() as conn:
        paused = conn.exec_driver_sql("SELECT paused FROM persched_jobs WHERE job_id = 'bad'").scalar_one()  # raw
        records = conn.execute(select(runs.c.outcome, runs.c.error).where(runs.c.job_id == "bad")).all()
    return paused, [(outcome, error) for outcome, error in records]


@pytest.mark.parametrize(
    ("column", "value"),
    [("misfire", "'bogus'"), ("timezone", "'Mars/Olympus_Mons'"), ("interval_seconds", "-10")],
    ids=["misfire", "timezone", "negative-interval"],
)
def test_a_lost_claim_settles_a_waiting_row_whose_schedule_cannot_be_read(
    store: Store, column: str, value: str
) -> None:
    """Values of their columns' types that no schedule takes: the row reads, its plan does not. A
    won claim pauses such a job with an "error" record (`mappers.plan_or_quarantine`: "its stored
    schedule cannot be read"); a lost one dropped its entry with nothing written, and when that entry
    was the job's last, the job waited for ever (the search for overdue rows passes such rows by)."""
    generation, slot = _scheduled(store)
    _edit(store, f"{column} = {value}")
    now = Instant(slot + 1)
    stale = Instant(slot - 1_000_000)
    miss = claim_one(store, "bad", generation, stale, now, "me", LEASE)
    assert isinstance(miss, ClaimMiss)
    paused, records = _stands(store)
    assert paused == 1
    ((outcome, error),) = records
    assert outcome == "error"
    assert error is not None
    assert "cannot be read" in error
    assert column in error or "interval" in error, error


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"], indirect=True)
def test_a_lost_claim_never_waits_for_an_unreadable_row_another_transaction_holds(store: Store) -> None:
    """An operator fixing the row in an open transaction holds its lock: a claim takes no row lock it
    would wait for (SKIP LOCKED), and the lost claim's settling of an unreadable row must not either,
    or every claim of the instance waits for the operator's commit (MariaDB: fails after its lock wait,
    retried; PostgreSQL: waits for ever). The row is left to the holder, and the entry looks again."""
    generation, slot = _scheduled(store)
    # A value of its column's type that the row reader refuses (a row problem), on either server.
    if store.dialect.name == "postgresql":
        _edit(store, "interval_seconds = 'NaN'")
    else:  # on a connection of its own: the store's keep their strict sql_mode
        editor = create_engine(store.engine.url, poolclass=NullPool)
        try:
            with editor.begin() as conn:
                conn.exec_driver_sql("SET SESSION sql_mode = ''")  # lets a zero date in
                conn.exec_driver_sql("UPDATE persched_jobs SET first_run_at = '0000-00-00' WHERE job_id = 'bad'")
        finally:
            editor.dispose()
    now = Instant(slot + 1)
    stale = Instant(slot - 1_000_000)
    results: list[object] = []
    with store.engine.connect() as operator:
        operator.execute(text("SELECT job_id FROM persched_jobs WHERE job_id = 'bad' FOR UPDATE"))
        claim = threading.Thread(
            target=lambda: results.append(claim_one(store, "bad", generation, stale, now, "me", LEASE)), daemon=True
        )
        claim.start()
        claim.join(TIMEOUT)
        waited = claim.is_alive()
        operator.rollback()
    claim.join(TIMEOUT)
    assert not waited, "the lost claim waited for the operator's transaction"
    (miss,) = results
    assert isinstance(miss, ClaimMiss)
    assert miss.due_at is not None  # looks again: the holder may have fixed it, or not
    assert _stands(store) == (False, [])
    # Released: the entry's next claim settles it.
    miss = claim_one(store, "bad", generation, stale, Instant(now + 1), "me", LEASE)
    paused, records = _stands(store)
    assert paused == 1
    assert [outcome for outcome, _ in records] == ["error"]


@pytest.mark.parametrize("engine_name", ["sqlite", "mariadb"], indirect=True)
def test_a_lost_claim_settles_a_row_whose_pause_flag_is_no_flag(store: Store) -> None:
    """A `paused` edited into something that is no flag (SQLite's 'yes', MariaDB's 7): the row reads
    as waiting, unpaused, with that column unreadable. Settled once, not looked at again and again."""
    generation, slot = _scheduled(store)
    _edit(store, "paused = 'yes'" if store.dialect.name == "sqlite" else "paused = 7")
    now = Instant(slot + 1)
    stale = Instant(slot - 1_000_000)
    miss = claim_one(store, "bad", generation, stale, now, "me", LEASE)
    assert isinstance(miss, ClaimMiss)
    assert miss.due_at is None  # settled: no entry looks at it again
    paused, records = _stands(store)
    assert paused == 1
    assert [outcome for outcome, _ in records] == ["error"]


@pytest.mark.parametrize("engine_name", ["sqlite"], indirect=True)
def test_a_lost_claim_drops_a_row_whose_generation_is_no_number(store: Store) -> None:
    """A `generation` that is no number never matches a claim or a quarantine (behaviour.md, "Rows
    edited by hand": it stays as it is, listed unreadable): the entry that lost on it is dropped, not
    sent to look again every 50 ms for ever."""
    generation, slot = _scheduled(store)
    _edit(store, "generation = 'two'")
    miss = claim_one(store, "bad", generation, Instant(slot - 1_000_000), Instant(slot + 1), "me", LEASE)
    assert isinstance(miss, ClaimMiss)
    assert miss.due_at is None
