"""One job row that the database refuses to update costs only its own job, on every engine.

A completion batch (or a dispatch that writes completions and claims
together) whose job UPDATE the database refuses for one row is written again
one completion at a time: the others are recorded and queued, and the refused
one's job is paused, with its run's outcome and an "error" record saying why
(docs/reference/behaviour.md#one-row-the-database-refuses). A recovery
refused the same way marks the run lost and pauses its job; a claim batch is
claimed entry by entry, and the refused entry's job is paused. The refusals
come from a trigger (tests/support/refusals.py) that acts as a 32-bit column
did at 2**31 - 1, or refuses the claim's move to running.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest

from persched import JobState
from persched._model.instant import Instant, Micros, micros
from persched._store import Claim, Completion, Recovery, Store
from tests.support.refusals import CLAIMING, COUNTING, REFUSAL, refused
from tests.support.store_calls import claim_won, schedule_each

T: Final = Instant(micros(1_700_000_000.25))
ME: Final = "me:1:aaaaaa"
OTHER: Final = "other:2:bbbbbb"
LEASE: Final = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def schedule(store: Store, *job_ids: str) -> None:
    schedule_each(store, job_ids, T)


def claimed(store: Store, job_id: str, who: str = ME) -> Claim:
    return claim_won(store, job_id, at(10), who, LEASE)


def assert_parked(store: Store, job_id: str, outcome: str | None) -> None:
    """`job_id` is paused (not running), its run has `outcome` (None: it has none), and an "error"
    record says why."""
    job = store.get_job(job_id)
    assert job is not None
    assert (job.state, job.owner, job.run_count) == (JobState.PAUSED, None, 0)
    records = store.list_runs(job_id)
    assert sorted(str(r.outcome) for r in records) == sorted(["error"] + ([] if outcome is None else [outcome]))
    (why,) = [r for r in records if r.run_now]
    assert why.outcome == "error"
    assert why.error is not None
    assert REFUSAL in why.error
    assert "paused" in why.error
    assert [r for r in store.open_runs() if r.job_id == job_id] == []


@pytest.mark.parametrize("bad_first", [True, False], ids=["bad-first", "bad-last"])
def test_a_refused_completion_is_parked_and_the_others_are_written(
    store: Store, bad_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    schedule(store, "a", "bad", "c")
    runs = {job_id: claimed(store, job_id) for job_id in ("a", "bad", "c")}
    order = ["bad", "a", "c"] if bad_first else ["a", "c", "bad"]
    completions = [Completion(runs[job_id], "ok", None, at(11)) for job_id in order]
    with refused(store.engine, "bad", COUNTING), caplog.at_level(logging.ERROR, logger="persched"):
        due = dict(zip(order, store.finish_runs(completions, ME), strict=True))
    assert due == {"a": at(20), "bad": None, "c": at(20)}
    for job_id in ("a", "c"):
        job = store.get_job(job_id)
        assert job is not None
        assert (job.state, job.run_count, job.last_outcome) == (JobState.SCHEDULED, 1, "ok")
    assert_parked(store, "bad", "ok")
    (logged,) = [r.getMessage() for r in caplog.records if "bad" in r.getMessage()]
    assert logged.startswith("job bad generation 1 paused: the database refused to record its run's outcome: ")
    assert REFUSAL in logged


def test_a_refused_completion_in_a_dispatch_still_lets_the_claims_through(store: Store) -> None:
    schedule(store, "a", "bad", "next")
    done = [Completion(claimed(store, job_id), "error", "boom", at(11)) for job_id in ("a", "bad")]
    with refused(store.engine, "bad", COUNTING):
        due, results = store.dispatch(done, [("next", 1, at(10), at(12))], at(12), ME, LEASE)
    assert due == [at(20), None]
    (won,) = results
    assert isinstance(won, Claim)
    assert won.job_id == "next"
    assert_parked(store, "bad", "error")


def test_a_refused_recovery_marks_the_run_lost_and_parks_the_job(store: Store) -> None:
    schedule(store, "bad", "a")
    claimed(store, "bad", who=OTHER)
    claimed(store, "a", who=OTHER)
    open_runs = sorted(store.open_runs(), key=lambda r: r.run_id)
    assert [r.job_id for r in open_runs] == ["bad", "a"]
    with refused(store.engine, "bad", COUNTING):
        assert [store.recover_run(r, at(50)) for r in open_runs] == [
            Recovery(lost=True),
            Recovery(lost=True, due=at(20)),
        ]
    assert_parked(store, "bad", "lost")
    job = store.get_job("a")
    assert job is not None
    assert (job.state, job.run_count, job.last_outcome) == (JobState.SCHEDULED, 1, "lost")


def test_a_refused_claim_is_parked_and_the_others_are_claimed(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    schedule(store, "a", "bad", "c")
    entries = [(job_id, 1, at(10), at(10)) for job_id in ("a", "bad", "c")]
    with refused(store.engine, "bad", CLAIMING), caplog.at_level(logging.ERROR, logger="persched"):
        results = store.claim_runs(entries, at(10), ME, LEASE)
    won = {r.job_id for r in results if isinstance(r, Claim)}
    assert won == {"a", "c"}
    assert_parked(store, "bad", None)
    (logged,) = [r.getMessage() for r in caplog.records if "bad" in r.getMessage()]
    assert "refused its claim" in logged
    assert REFUSAL in logged
