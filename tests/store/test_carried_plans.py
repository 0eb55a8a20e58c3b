"""The dispatch path's writes: a claim decided from the row it locked, a completion decided by its claim.

A claim reads its rows with a lock, decides in Python, and writes each won
row once. A claim carries its plan to the completion (`records.Carried`),
whose UPDATE holds only while the row stands where the claim left it. This
shortcut is checked here against what the row really did meanwhile (another
instance moved it on, a pause, a resume, a run-now request), on every
engine, and against a broken variant that trusts it without the row's check
(``xfail(strict=True)``): so the check is what keeps a slot right.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest
from sqlalchemy import event

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion, Store, completions
from tests.support import race_jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from collections.abc import Iterator

T = Instant(micros(EPOCH + 0.1234567))  # an odd instant: whole microseconds, no round grid
ME = "me:1:aaaaaa"
OTHER = "other:2:bbbbbb"
LEASE = Micros(30_000_000)

# The broken variant: the same parameters, the row's check gone.
TRUSTED_CARRY = completions._FINISH_JOB + " AND ? IS NOT NULL AND ? IS NOT NULL"  # for completions._FINISH_CARRIED
BROKEN_CARRY = pytest.param(
    True,
    id="broken-carried-completion-trusted",
    marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason="the completion undoes a change"),
)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def _schedule(store: Store, interval: float = 10.0, **options: object) -> Instant:
    """Job "a" every `interval` s from T, first slot at T + interval; that slot."""
    definition = validate_definition("a", race_jobs.RECORD, validate_policies(interval, **options), (), {}, None)
    job, _, _ = store.upsert_job(definition, T)
    return from_datetime(job.next_run_at)


def _claim(store: Store, bound: Instant, now: Instant, instance_id: str = ME) -> Claim:
    (claim,) = store.claim_runs([("a", 1, bound, now)], now, instance_id, LEASE)
    assert isinstance(claim, Claim), claim
    return claim


def _finish(store: Store, claim: Claim, at_: Instant, instance_id: str = ME) -> Instant | None:
    (due,) = store.finish_runs([Completion(claim, "ok", None, at_)], instance_id)
    return due


def _row(store: Store) -> tuple[Instant, Instant | None, str]:
    """Job "a"'s next_run_at, run_now_at and state, as stored."""
    job = store.get_job("a")
    assert job is not None
    with store.engine.connect() as conn:
        run_now_at = conn.exec_driver_sql("SELECT run_now_at FROM persched_jobs WHERE job_id = 'a'").scalar()
    return (
        from_datetime(job.next_run_at),
        None if run_now_at is None else store.dialect.raw_instant(run_now_at),
        job.state,
    )


@contextmanager
def _statements(store: Store) -> Iterator[list[str]]:
    """The statements the store sends meanwhile (as the engine's listeners see them)."""
    seen: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:  # noqa: ANN401 - SQLAlchemy's listener
        seen.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", note)


def _job_writes(statements: list[str]) -> int:
    """How many of `statements` write a job's row."""
    return sum(s.startswith("UPDATE persched_jobs") for s in statements)


def test_a_claim_writes_its_row_once_with_both_slots(store: Store) -> None:
    slot = _schedule(store)
    first = _claim(store, slot, at(10.5))
    _finish(store, first, at(10.6))
    # Late: slots 20 and 30 passed; coalesced into the run for 30, next slot 40.
    with _statements(store) as seen:
        second = _claim(store, at(20), at(35))
    assert second.scheduled_for == at(30)
    assert _row(store) == (at(40), None, "running")
    assert _job_writes(seen) == 1, seen  # one write back of the row: running slot 30, next slot 40
    with _statements(store) as seen:
        assert _finish(store, second, at(35.1)) == at(40)
    assert not any(s.startswith("SELECT") for s in seen), seen  # decided by the claim: not read again


def test_a_claim_decides_from_the_row_another_instance_moved_on(store: Store) -> None:
    """Another instance ran slot 20 after our completion of slot 10. With misfire "catch_up" the
    slot that runs depends on where the row stands: from 20 it would be 20 again (a slot run twice,
    which the history's unique slot refuses: no run at all), from 30 it is 30."""
    slot = _schedule(store, misfire="catch_up", max_catch_up=2)
    _finish(store, _claim(store, slot, at(10.5)), at(10.6))
    other = Store(store.engine, store.url)
    _finish(other, _claim(other, at(20), at(20.5), OTHER), at(20.6), OTHER)  # the row: next_run_at 30
    claim = _claim(store, at(30), at(31))
    assert claim.scheduled_for == at(30)  # the row's own next slot
    assert _row(store) == (at(40), None, "running")
    assert sorted(from_datetime(run.scheduled_for) for run in store.list_runs("a")) == [at(10), at(20), at(30)]


@pytest.mark.parametrize("broken", [False, BROKEN_CARRY])
def test_a_run_now_request_made_during_the_run_is_kept_and_queued(store: Store, broken: bool) -> None:
    slot = _schedule(store)
    claim = _claim(store, slot, at(10.5))
    assert store.request_run_now("a", at(11)).verdict.will_run
    with patch.object(completions, "_FINISH_CARRIED", TRUSTED_CARRY) if broken else _nothing():
        due = _finish(store, claim, at(12))
    assert _row(store) == (at(20), at(11), "scheduled")
    assert due == at(11)  # the request, not the next grid slot


@pytest.mark.parametrize("broken", [False, BROKEN_CARRY])
def test_a_pause_and_resume_during_the_run_keep_the_resumed_slot(store: Store, broken: bool) -> None:
    """Paused at 11 and resumed at 34 while the run for slot 10 goes on: the grid goes on from 34
    (slots 20 and 30 are not run), and the completion must not put the row back on 20."""
    slot = _schedule(store)
    claim = _claim(store, slot, at(10.5))
    assert store.pause_job("a", at(11)) is not None
    assert store.resume_job("a", at(34)) is not None
    with patch.object(completions, "_FINISH_CARRIED", TRUSTED_CARRY) if broken else _nothing():
        due = _finish(store, claim, at(35))
    assert _row(store) == (at(40), None, "scheduled")
    assert due == at(40)


@pytest.mark.parametrize("broken", [False, BROKEN_CARRY])
def test_a_pause_during_the_run_leaves_the_job_unqueued(store: Store, broken: bool) -> None:
    slot = _schedule(store)
    claim = _claim(store, slot, at(10.5))
    assert store.pause_job("a", at(11)) is not None
    with patch.object(completions, "_FINISH_CARRIED", TRUSTED_CARRY) if broken else _nothing():
        due = _finish(store, claim, at(12))
    assert due is None
    job = store.get_job("a")
    assert job is not None
    assert job.paused


def test_a_batch_with_one_moved_row_writes_the_others_as_carried(store: Store) -> None:
    """One row of the cycle was paused meanwhile: every completion is read, each decided right."""
    for job_id in ("a", "b"):
        store.upsert_job(validate_definition(job_id, race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    won = store.claim_runs([(j, 1, at(10), at(10.5)) for j in ("a", "b")], at(10.5), ME, LEASE)
    assert all(isinstance(c, Claim) for c in won)
    assert store.pause_job("b", at(11)) is not None
    due = store.finish_runs([Completion(c, "ok", None, at(12)) for c in won if isinstance(c, Claim)], ME)
    assert due == [at(20), None]
    assert _row(store)[0::2] == (at(20), "scheduled")


@contextmanager
def _nothing() -> Iterator[None]:
    yield
