"""Counters at their bound, on every engine (docs/reference/behaviour.md#counters).

`run_count` and `error_count` are 64-bit on every engine, and a completion or
a recovery that would pass 2**63 - 1 leaves them there (saturates) instead of
failing: a job whose counter reached its bound still runs, and its
completions never fail the batch they are written in. The tests plant the
counters at the old 32-bit bound and at the 64-bit one.
"""

from __future__ import annotations

from typing import Final

import pytest
from sqlalchemy import select, update

from persched import JobState
from persched._model.instant import Instant, Micros, micros, to_datetime
from persched._store import Claim, OpenRun, Recovery, Store
from persched._store.schema import jobs
from tests.support.store_calls import claim_won, finish_one, schedule_each

T: Final = Instant(micros(1_700_000_000.25))
ME: Final = "me:1:aaaaaa"
OTHER: Final = "other:2:bbbbbb"
LEASE: Final = Micros(30_000_000)
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def schedule(store: Store, job_id: str) -> None:
    schedule_each(store, [job_id], T)


def plant(store: Store, job_id: str, runs: int, errors: int) -> None:
    with store.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(run_count=runs, error_count=errors))


def counters(store: Store, job_id: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        row = conn.execute(select(jobs.c.run_count, jobs.c.error_count).where(jobs.c.job_id == job_id)).one()
    return int(row.run_count), int(row.error_count)


def claimed(store: Store, job_id: str, who: str = ME) -> Claim:
    return claim_won(store, job_id, at(10), who, LEASE)


@pytest.mark.parametrize(
    ("planted", "expected"),
    [(INT32_MAX, INT32_MAX + 1), (INT64_MAX - 1, INT64_MAX), (INT64_MAX, INT64_MAX)],
    ids=["int32-bound", "one-below-int64", "int64-bound"],
)
def test_a_completion_counts_past_32_bits_and_saturates_at_64(store: Store, planted: int, expected: int) -> None:
    schedule(store, "a")
    plant(store, "a", planted, planted)
    run = claimed(store, "a")
    assert finish_one(store, run, ME, at(11), "error", "boom") == at(20)
    assert counters(store, "a") == (expected, expected)
    (job,) = store.list_jobs()
    assert (job.state, job.run_count, job.error_count, job.last_outcome) == (
        JobState.SCHEDULED,
        expected,
        expected,
        "error",
    )
    assert [r.outcome for r in store.list_runs("a")] == ["error"]


@pytest.mark.parametrize("planted", [INT32_MAX, INT64_MAX], ids=["int32-bound", "int64-bound"])
def test_a_recovery_counts_past_32_bits_and_saturates_at_64(store: Store, planted: int) -> None:
    schedule(store, "a")
    plant(store, "a", planted, 0)
    run = claimed(store, "a", who=OTHER)
    (open_run,) = store.open_runs()
    assert open_run == OpenRun(run.run_id, "a", 1, OTHER, to_datetime(at(10) + LEASE))
    assert store.recover_run(open_run, at(50)) == Recovery(lost=True, due=at(20))
    assert counters(store, "a") == (min(planted + 1, INT64_MAX), 0)
    assert store.open_runs() == []
