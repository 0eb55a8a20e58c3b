"""A lost attempt in the store, on every engine (docs/reference/behaviour.md, "Retries").

With ``retry_lost`` the recovery that records a run lost makes the next
attempt of its slot, due its delay after the recovery, and the claim of that
entry starts it as that attempt; without it, or without time before the next
slot, the slot is settled, and a slot that had retries says it gave up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from persched._model.instant import Instant, Micros, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Recovery
from tests.support import race_jobs
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    import pytest

    from persched._store import Store

T: Final = Instant(micros(1_700_000_123.456789))  # an odd instant
ME: Final = "me:1:aaaaaa"
OTHER: Final = "other:2:bbbbbb"  # an instance that dies with its run
LEASE: Final = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def _schedule(store: Store, *, retry_lost: bool) -> None:
    """Job "a" every 10 s from T, two retries one second apart."""
    policies = validate_policies(10.0, retries=2, retry_delay_seconds=1.0, retry_backoff=1.0, retry_lost=retry_lost)
    store.upsert_job(validate_definition("a", race_jobs.RECORD, policies, ("a",), {}, 0), T)


def _claim(store: Store, expected: float, who: str) -> Claim:
    claimed = claim_one(store, "a", 1, at(expected), at(expected), who, LEASE)
    assert isinstance(claimed, Claim), claimed
    return claimed


def _gave_up(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]


def test_a_lost_run_with_retry_lost_is_tried_again_as_the_next_attempt(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    _schedule(store, retry_lost=True)
    _claim(store, 0, OTHER)
    (open_run,) = store.open_runs()
    assert store.recover_run(open_run, at(3)) == Recovery(lost=True, due=at(4))
    (job,) = store.list_jobs()
    assert (job.pending_attempt, job.failure_streak) == (2, 1)
    assert job.pending_attempt_slot is not None
    again = _claim(store, 4, ME)
    assert (again.attempt, again.scheduled_for) == (2, T)
    assert finish_one(store, again, ME, at(4.5), "ok", None) == at(10)
    (job,) = store.list_jobs()
    assert (job.pending_attempt, job.failure_streak) == (None, 0)
    assert _gave_up(caplog) == []


def test_a_lost_attempt_without_retry_lost_settles_its_slot_and_says_so(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    _schedule(store, retry_lost=False)
    first = _claim(store, 0, ME)
    assert finish_one(store, first, ME, at(0.5), "error", "boom") == at(1.5)  # attempt 2 due
    _claim(store, 1.5, OTHER)
    (open_run,) = store.open_runs()
    assert store.recover_run(open_run, at(3)) == Recovery(lost=True, due=at(10))  # the next slot
    (job,) = store.list_jobs()
    assert (job.pending_attempt, job.failure_streak, job.last_outcome) == (None, 1, "lost")  # one slot failed
    [said] = _gave_up(caplog)
    assert "after 2 attempts (the last: lost)" in said


def test_no_attempt_past_the_next_slot_after_a_loss(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    _schedule(store, retry_lost=True)
    _claim(store, 0, OTHER)
    (open_run,) = store.open_runs()
    assert store.recover_run(open_run, at(9.5)) == Recovery(lost=True, due=at(10))  # 10.5 s is past the slot
    (job,) = store.list_jobs()
    assert job.pending_attempt is None
    [said] = _gave_up(caplog)
    assert "after 1 attempts (the last: lost)" in said
