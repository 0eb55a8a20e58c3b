"""Attempts at the edges (docs/reference/behaviour.md, "Retries"), on every engine: rows a clock
ahead wrote, hand-edited pending attempts, and extreme retry options.

Store-level: every call gets its `now`, so no clock and no scheduler is involved.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion, Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched.testing import FakeClock
from tests.support import jobs, race_jobs
from tests.support.helpers import EPOCH, TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import Job, JobScheduler, Run
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

T: Final = Instant(micros(EPOCH) + 654_321)  # an odd instant
LEASE: Final = Micros(30_000_000)
DAY: Final = 86_400_000_000
AHEAD: Final = "ahead:1:aaaaaa"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    engine = _db.make_engine(db_url)
    try:
        _migrate.upgrade(engine)
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


def _schedule(store: Store, job_id: str, interval: float = 60.0, **policies: Any) -> Job:  # noqa: ANN401
    definition = validate_definition(
        job_id, race_jobs.RECORD, validate_policies(interval, **policies), (job_id,), {}, None
    )
    job, _, _ = store.upsert_job(definition, T)
    return job


def _claim(store: Store, job: Job, now: Instant, who: str) -> Claim:
    found = store.get_job(job.job_id)
    assert found is not None
    due = from_datetime(found.next_run_at)
    won = store.claim_runs([(job.job_id, job.generation, due, now)], now, who, LEASE)[0]
    assert isinstance(won, Claim), won
    return won


def _next(store: Store, job_id: str) -> tuple[Instant, int | None]:
    job = store.get_job(job_id)
    assert job is not None
    return from_datetime(job.next_run_at), job.pending_attempt


# --- a clock ahead --------------------------------------------------------------------------------


@pytest.mark.parametrize("retries", [0, 2], ids=["no-retries", "retries"])
def test_a_failed_run_on_a_clock_a_day_ahead_does_not_hold_the_job_back_for_a_day(store: Store, retries: int) -> None:
    # An instance whose wall clock is a day ahead runs the job's slot of "tomorrow", and it fails.
    job = _schedule(store, "j", retries=retries, retry_delay_seconds=10)
    ahead_now = Instant(T + DAY)
    claim = _claim(store, job, ahead_now, AHEAD)
    store.finish_runs([Completion(claim, "error", "boom", Instant(ahead_now + 1_000_000))], AHEAD)
    assert _next(store, "j")[1] == (2 if retries else None)
    # A start-up on a right clock, a minute after the job was made: its row lay a day ahead of its grid,
    # so it is put back there, whether or not an attempt of that (future) slot was pending.
    now = Instant(T + 61_000_000)
    _, corrections, _ = store.sweep(None, 10_000, now)
    assert [c.job_id for c in corrections] == ["j"]
    next_at, pending = _next(store, "j")
    assert pending is None
    assert now < next_at <= Instant(now + 60_000_000)


# --- on a scheduler, on a FakeClock at an odd instant ----------------------------------------------

START: Final = 1_700_000_123.456789


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def _runs(sched: JobScheduler, job_id: str) -> list[Run]:
    assert sched.wait_idle(TIMEOUT)
    return sorted(sched.runs(job_id, limit=1_000), key=lambda run: run.run_id or 0)


def _advance(sched: JobScheduler, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    assert sched.wait_idle(TIMEOUT)


@pytest.mark.parametrize("restart", [False, True], ids=["running", "after-a-restart"])
def test_a_job_with_jitter_starts_its_attempt_exactly_when_due(
    make_scheduler: SchedulerFactory, clock: FakeClock, restart: bool
) -> None:
    # Jitter spreads a job's slots; an attempt is due exactly its delay after the last one ended.
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched.schedule(
        "jit",
        jobs.follow,
        3600.0,
        args=("jit", ["error", "ok"]),
        start_in=0,
        jitter_seconds=1800,
        retries=1,
        retry_delay_seconds=10,
    )
    _advance(sched, clock, 1800)  # the first slot, whatever its jitter
    [first] = _runs(sched, "jit")
    assert first.finished_at is not None
    job = sched.get_job("jit")
    assert job is not None
    assert (job.pending_attempt, job.next_run_at) == (2, first.finished_at + timedelta(seconds=10))
    if restart:  # the attempt is queued from the database at start-up
        sched.shutdown()
        sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
        assert sched.wait_idle(TIMEOUT)
    _advance(sched, clock, 10 - 0.000_001)
    assert len(_runs(sched, "jit")) == 1
    _advance(sched, clock, 0.000_001)
    assert [(r.attempt, r.outcome) for r in _runs(sched, "jit")] == [(1, "error"), (2, "ok")]
