"""Attempts at the edges (docs/reference/behaviour.md, "Retries"), on every engine: rows a clock
ahead wrote, hand-edited pending attempts, and extreme retry options.

Store-level: every call gets its `now`, so no clock and no scheduler is involved.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion, Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched.testing import FakeClock
from tests.support import jobs, race_jobs
from tests.support.attempts import START, advance, settled_runs
from tests.support.helpers import EPOCH, TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import Job
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

T: Final = Instant(micros(EPOCH) + 654_321)  # an odd instant
LEASE: Final = Micros(30_000_000)
DAY: Final = 86_400_000_000
AHEAD: Final = "ahead:1:aaaaaa"
RIGHT: Final = "right:2:bbbbbb"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    engine = _db.make_engine(db_url)
    try:
        _migrate.upgrade(engine)
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


def _schedule(store: Store, job_id: str, interval: float = 60.0, start_in: float | None = None, **policies: Any) -> Job:  # noqa: ANN401
    policy = validate_policies(interval, **policies)
    definition = validate_definition(job_id, race_jobs.RECORD, policy, (job_id,), {}, start_in)
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


def test_a_lost_run_recovered_on_a_clock_a_day_ahead_makes_no_attempt_past_its_slot(store: Store) -> None:
    # A right instance runs the slot and dies; an instance a day ahead recovers the run (retry_lost). By
    # its clock the attempt would come a day after the slot's time: it is not made, and the job waits
    # at its next slot, not a day ahead.
    job = _schedule(store, "lost", retries=2, retry_delay_seconds=10, retry_lost=True)
    slot = from_datetime(job.next_run_at)
    claim = _claim(store, job, slot, RIGHT)
    [open_run] = [r for r in store.open_runs() if r.run_id == claim.run_id]
    store.recover_run(open_run, Instant(slot + DAY))
    assert _next(store, "lost") == (Instant(slot + 60_000_000), None)


# --- a pending attempt and a run-now request at once --------------------------------------------------


def test_a_pending_attempt_and_a_run_now_request_due_together_each_run_once(store: Store) -> None:
    job = _schedule(store, "both", 3600.0, retries=2, retry_delay_seconds=10, start_in=0)
    slot = from_datetime(job.next_run_at)
    first = _claim(store, job, slot, AHEAD)
    ended = Instant(slot + 1_000_003)
    store.finish_runs([Completion(first, "error", "boom", ended)], AHEAD)
    due = Instant(ended + 10_000_000)
    assert _next(store, "both") == (due, 2)
    store.request_run_now("both", Instant(due - 5_000_000))  # asked before the attempt is due, not yet taken
    started: list[tuple[int, bool, Instant]] = []
    now = due
    for _ in range(4):  # each claim starts one run; the row is free again after each completion
        got = store.claim_runs([("both", job.generation, now, now)], now, AHEAD, LEASE)[0]
        if not isinstance(got, Claim):
            break
        started.append((got.attempt, got.run_now, got.scheduled_for))
        now = Instant(now + 1_000_000)
        store.finish_runs([Completion(got, "error", "boom", now)], AHEAD)
    # The attempt ran as attempt 2 of its slot and the request as a run-now run, attempt 1; the run-now
    # run's failure is not retried, the attempt's is (attempt 3 pending); nothing ran twice.
    assert sorted((attempt, run_now) for attempt, run_now, _ in started) == [(1, True), (2, False)]
    assert [at for attempt, _, at in started if attempt == 2] == [slot]
    assert _next(store, "both")[1] == 3


# --- on a scheduler, on a FakeClock at an odd instant ----------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


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
    advance(sched, clock, 1800)  # the first slot, whatever its jitter
    [first] = settled_runs(sched, "jit")
    assert first.finished_at is not None
    job = sched.get_job("jit")
    assert job is not None
    assert (job.pending_attempt, job.next_run_at) == (2, first.finished_at + timedelta(seconds=10))
    if restart:  # the attempt is queued from the database at start-up
        sched.shutdown()
        sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
        assert sched.wait_idle(TIMEOUT)
    advance(sched, clock, 10 - 0.000_001)
    assert len(settled_runs(sched, "jit")) == 1
    advance(sched, clock, 0.000_001)
    assert [(r.attempt, r.outcome) for r in settled_runs(sched, "jit")] == [(1, "error"), (2, "ok")]


def test_overlap_skip_gives_no_retry_once_the_run_outlasted_its_next_slot(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    gate = jobs.gate("ov")
    sched.schedule(
        "ov", jobs.block_then_fail, 60.0, args=("ov",), start_in=0, overlap="skip", retries=2, retry_delay_seconds=10
    )
    assert gate.started.wait(TIMEOUT)
    [running] = sched.runs("ov")
    slot = running.scheduled_for
    clock.advance(130)  # the slots +60 and +120 pass while attempt 1 runs
    gate.release.set()
    runs = settled_runs(sched, "ov")
    assert [(r.attempt, r.outcome) for r in runs if r.outcome != "missed"] == [(1, "error")]
    job = sched.get_job("ov")
    assert job is not None
    # Its next slot (+60) came before the run ended: no attempt; the overlap dropped +60 and +120.
    assert (job.pending_attempt, job.next_run_at) == (None, slot + timedelta(seconds=180))
    assert len([r for r in caplog.records if "gave up" in r.getMessage()]) == 1
    advance(sched, clock, 50)  # +180: a slot of its own, attempt 1 again, and its retry pending
    runs = [r for r in settled_runs(sched, "ov") if r.outcome != "missed"]
    assert [(r.attempt, r.outcome, r.scheduled_for) for r in runs][-1] == (1, "error", slot + timedelta(seconds=180))
    assert sched.get_job("ov").pending_attempt == 2  # type: ignore[union-attr]


def test_catch_up_after_a_downtime_drops_the_passed_attempt_and_runs_each_missed_slot_once(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched.schedule(
        "cu",
        jobs.follow,
        60.0,
        args=("cu", ["error"]),
        start_in=0,
        misfire="catch_up",
        max_catch_up=10,
        grace_seconds=3600,
        retries=1,
        retry_delay_seconds=30,
    )
    [first] = settled_runs(sched, "cu")
    sched.shutdown()
    clock.advance(150)  # down: the attempt (+30) and the slots +60, +120 pass
    again = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    runs = settled_runs(again, "cu")
    slot = first.scheduled_for
    assert [(r.attempt, r.outcome, r.scheduled_for) for r in runs] == [
        (1, "error", slot),
        (1, "ok", slot + timedelta(seconds=60)),
        (1, "ok", slot + timedelta(seconds=120)),
    ]
    job = again.get_job("cu")
    assert job is not None
    assert (job.pending_attempt, job.next_run_at) == (None, slot + timedelta(seconds=180))


def test_a_hundred_retries_a_millisecond_apart_each_run_once_and_the_slot_is_given_up_once(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched.schedule(
        "many",
        jobs.follow,
        3600.0,
        args=("many", ["error"] * 200),
        start_in=0,
        retries=100,
        retry_delay_seconds=0.001,
        retry_backoff=1.0,
        pause_after_failures=2,
    )
    assert len(settled_runs(sched, "many")) == 1
    for _ in range(100):
        advance(sched, clock, 0.0011)  # a little more than the delay: the clock's float steps
    runs = settled_runs(sched, "many")
    assert [r.attempt for r in runs] == list(range(1, 102))
    assert {r.scheduled_for for r in runs} == {runs[0].scheduled_for}
    job = sched.get_job("many")
    assert job is not None
    assert (job.pending_attempt, job.failure_streak, job.paused) == (None, 1, False)  # one slot failed
    assert job.next_run_at == runs[0].scheduled_for + timedelta(hours=1)
    assert [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()] == [
        m for m in [r.getMessage() for r in caplog.records] if "after 101 attempts" in m
    ]
    assert len([r for r in caplog.records if "gave up" in r.getMessage()]) == 1


def test_a_cron_retry_across_the_fall_back_is_due_in_elapsed_time_and_never_reaches_the_next_fire(
    make_scheduler: SchedulerFactory,
) -> None:
    # 01:30 New York on 2026-11-01 comes twice (EDT, then EST); the clocks go back at 06:00 UTC.
    start = datetime(2026, 11, 1, 5, 29, 0, 123_457, tzinfo=timezone.utc).timestamp()
    clock = FakeClock(start)
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched.schedule(
        "dst",
        jobs.follow,
        cron="30 1 * * *",
        timezone="America/New_York",
        args=("dst", ["error", "error", "ok"]),
        retries=3,
        retry_delay_seconds=1800,
        retry_backoff=1.0,
    )
    fires = sched.next_runs("dst", count=3)
    advance(sched, clock, 60)  # 05:30 UTC, 01:30 EDT
    [first] = settled_runs(sched, "dst")
    assert first.scheduled_for == fires[0]
    assert first.finished_at is not None
    job = sched.get_job("dst")
    assert job is not None
    due = first.finished_at + timedelta(seconds=1800)  # elapsed time: 06:00 UTC, 01:00 EST
    if due < fires[1]:
        assert (job.pending_attempt, job.next_run_at) == (2, due)
        advance(sched, clock, 1800)
        assert [(r.attempt, r.scheduled_for) for r in settled_runs(sched, "dst")][-1] == (2, fires[0])
    else:
        assert (job.pending_attempt, job.next_run_at) == (None, fires[1])
    # No attempt at or after the next fire: whatever ran there is that fire's attempt 1.
    advance(sched, clock, 3600 * 2)
    for run in settled_runs(sched, "dst"):
        assert run.scheduled_for in fires
        assert run.attempt == 1 or run.started_at < fires[fires.index(run.scheduled_for) + 1]


@pytest.mark.parametrize(("cap", "attempts"), [(None, [1, 2]), (20.0, [1, 2, 3, 4])], ids=["no-cap", "capped"])
def test_a_huge_backoff_gives_up_or_is_capped(
    make_scheduler: SchedulerFactory, clock: FakeClock, cap: float | None, attempts: list[int]
) -> None:
    sched = make_scheduler(clock=clock, heartbeat_seconds=1.0, start=True)
    sched.schedule(
        "huge",
        jobs.follow,
        3600.0,
        args=("huge", ["error"] * 10),
        start_in=0,
        retries=3,
        retry_delay_seconds=10,
        retry_backoff=1e300,  # attempt 3's delay overflows any float: no slot is that long
        retry_max_delay_seconds=cap,
    )
    assert [r.attempt for r in settled_runs(sched, "huge")] == [1]
    advance(sched, clock, 10)
    advance(sched, clock, 20)
    advance(sched, clock, 20)
    runs = settled_runs(sched, "huge")
    assert [r.attempt for r in runs] == attempts
    job = sched.get_job("huge")
    assert job is not None
    assert (job.pending_attempt, job.next_run_at) == (None, runs[0].scheduled_for + timedelta(hours=1))
