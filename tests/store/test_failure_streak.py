"""The count of failed slots in a row and the pause it brings, in the store, on every engine
(docs/reference/behaviour.md#repeated-failures).

The completion's and the recovery's own UPDATE counts; the same transaction
pauses the job whose count reached its ``pause_after_failures``, tells
`Store.failures_paused` after the commit, and does not queue it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import select, update

from persched._model.instant import Instant, Micros, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Recovery
from persched._store.schema import jobs
from tests.support import race_jobs
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(1_700_000_123.456789))  # an odd instant
ME: Final = "me:1:aaaaaa"
OTHER: Final = "other:2:bbbbbb"
LEASE: Final = Micros(30_000_000)
INT64_MAX: Final = 2**63 - 1


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def schedule(store: Store, pause_after_failures: int | None) -> int:
    """Job "a" every 10 s from T; its generation."""
    policies = validate_policies(10.0, pause_after_failures=pause_after_failures)
    job, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, policies, ("a",), {}, 0), T)
    return job.generation


def claim(store: Store, k: int, who: str = ME) -> Claim:
    """The claim of slot k (T + 10 k), taken up on time."""
    claimed = claim_one(store, "a", 1, at(10 * k), at(10 * k), who, LEASE)
    assert isinstance(claimed, Claim), claimed
    return claimed


def run(store: Store, k: int, outcome: str) -> Instant | None:
    """Slot k claimed and ended with `outcome` a second later; when the job is due next."""
    return finish_one(store, claim(store, k), ME, at(10 * k + 1), outcome, None if outcome == "ok" else "boom")


def streak(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(jobs.c.failure_streak).where(jobs.c.job_id == "a")).scalar_one())


@pytest.fixture
def told(store: Store) -> list[tuple[str, int]]:
    """What the store told its `failures_paused` hook."""
    seen: list[tuple[str, int]] = []
    store.failures_paused = lambda job_id, generation: seen.append((job_id, generation))
    return seen


def test_failures_count_up_and_a_success_sets_the_count_to_zero(store: Store, told: list[tuple[str, int]]) -> None:
    schedule(store, None)
    counts = []
    for k, outcome in enumerate(["error", "error", "ok", "error"]):
        run(store, k, outcome)
        counts.append(streak(store))
    assert counts == [1, 2, 0, 1]
    assert told == []


def test_the_nth_failure_pauses_the_job_in_its_completion(store: Store, told: list[tuple[str, int]]) -> None:
    schedule(store, 2)
    assert run(store, 0, "error") == at(10)
    assert run(store, 1, "error") is None  # paused: not queued
    (job,) = store.list_jobs()
    assert (job.paused, job.pause_note, job.failure_streak, job.state.value) == (
        True,
        "paused after 2 consecutive failures",
        2,
        "paused",
    )
    assert told == [("a", 1)]


def test_a_lost_run_counts_and_its_recovery_pauses_the_job(store: Store, told: list[tuple[str, int]]) -> None:
    schedule(store, 2)
    run(store, 0, "error")
    claim(store, 1, who=OTHER)  # an instance that dies with its run
    (open_run,) = store.open_runs()
    assert store.recover_run(open_run, at(50)) == Recovery(lost=True)  # paused: not queued
    (job,) = store.list_jobs()
    assert (job.paused, job.pause_note, job.failure_streak, job.last_outcome) == (
        True,
        "paused after 2 consecutive failures",
        2,
        "lost",
    )
    assert told == [("a", 1)]


def test_a_lost_run_below_the_option_only_counts(store: Store, told: list[tuple[str, int]]) -> None:
    schedule(store, 3)
    run(store, 0, "error")
    claim(store, 1, who=OTHER)
    (open_run,) = store.open_runs()
    assert store.recover_run(open_run, at(50)) == Recovery(lost=True, due=at(20))  # its next slot, late
    assert streak(store) == 2
    assert told == []


def test_a_job_paused_already_keeps_its_pause_and_is_not_told(store: Store, told: list[tuple[str, int]]) -> None:
    schedule(store, 1)
    running = claim(store, 0)
    assert store.pause_job("a", at(0.5), note="maintenance") == 1
    assert finish_one(store, running, ME, at(1), "error", "boom") is None
    (job,) = store.list_jobs()
    assert (job.paused, job.pause_note, job.failure_streak) == (True, "maintenance", 1)
    assert told == []


def test_the_count_saturates_at_its_bound(store: Store) -> None:
    schedule(store, None)
    with store.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.job_id == "a").values(failure_streak=INT64_MAX))
    run(store, 0, "error")
    assert streak(store) == INT64_MAX


def test_a_hook_that_raises_never_fails_the_completion(store: Store) -> None:
    schedule(store, 1)

    def broken_hook(job_id: str, generation: int) -> None:
        raise RuntimeError("a listener's bug")

    store.failures_paused = broken_hook
    assert run(store, 0, "error") is None
    assert store.list_jobs()[0].paused


def test_a_missed_record_neither_counts_nor_resets(store: Store) -> None:
    policies = validate_policies(10.0, misfire="skip", pause_after_failures=3)
    store.upsert_job(validate_definition("a", race_jobs.RECORD, policies, ("a",), {}, 0), T)
    run(store, 0, "error")
    # At T+45 the slots 10-40 passed: dropped as missed, and nothing runs until the slot at 50.
    assert not isinstance(claim_one(store, "a", 1, at(10), at(45), ME, LEASE), Claim)
    assert streak(store) == 1
    next_one = claim_one(store, "a", 1, at(50), at(50), ME, LEASE)
    assert isinstance(next_one, Claim), next_one
    finish_one(store, next_one, ME, at(51), "error", "boom")
    outcomes = [r.outcome for r in store.list_runs("a")]
    assert "missed" in outcomes
    assert streak(store) == 2
