"""The read commands' plain rows (`persched._model.plain_models`) hold what the public models hold.

`persched jobs`, `show` and `runs` print `PlainJob` / `PlainRun`, read by the
store's ``*_as`` listings, so that they never import pydantic. These tests
keep the two pairs of types in step (fields, types, defaults) and check, on
every engine, that a listing read either way gives the same values: jobs of
each kind with their policies, runs of each outcome, a run in flight and a
row edited by hand into something unreadable.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import Job, JobScheduler, Run
from persched._model.instant import to_datetime
from persched._model.models import JobState, Outcome
from persched._model.plain_models import PlainJob, PlainRun
from persched._store.mappers import plain_job, plain_run
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pydantic import BaseModel

    from persched._store import Store

START: Final = 1_700_000_123.4567  # an odd instant: sub-second, not a round number
PARIS_SUMMER: Final = timezone(timedelta(hours=2))  # an aware instant off UTC: stored as UTC


@pytest.mark.parametrize(("plain", "public"), [(PlainJob, Job), (PlainRun, Run)])
def test_plain_types_have_the_fields_types_and_defaults_of_the_public_models(
    plain: type, public: type[BaseModel]
) -> None:
    names = {"datetime": datetime, "JobState": JobState, "Outcome": Outcome}  # the plain module's TYPE_CHECKING names
    hints = typing.get_type_hints(plain, localns=names)
    public_hints = typing.get_type_hints(public)
    fields = dataclasses.fields(plain)
    assert [f.name for f in fields] == list(public.model_fields)
    for f in fields:
        assert hints[f.name] == public_hints[f.name], f.name
        model_field = public.model_fields[f.name]
        default = dataclasses.MISSING if model_field.is_required() else model_field.default
        assert f.default == default, f.name


def _fields(plain: PlainJob | PlainRun) -> dict[str, Any]:
    return {f.name: getattr(plain, f.name) for f in dataclasses.fields(plain)}


@pytest.fixture
def sched(store: Store, db_url: str) -> Iterator[JobScheduler]:
    """A started scheduler on the store's database, at an odd instant, with jobs of every kind and
    runs of every outcome; "slow" is in flight until teardown."""
    clock = FakeClock(START)
    scheduler = JobScheduler(db_url, clock=clock, workers=4)
    try:
        scheduler.schedule("every", jobs.record, 10.0, args=["every", 1, [2.5]], kwargs={"k": {"n": None}})
        scheduler.schedule("failing", jobs.fail, 7.0, args=["failing", "boom"], max_runtime_seconds=30.0)
        scheduler.schedule(
            "cron", jobs.record, cron="*/5 * * * *", timezone="Europe/Paris", args=["cron"], misfire="skip"
        )
        scheduler.schedule("caught", jobs.record, 3.0, args=["caught"], misfire="catch_up", max_catch_up=2)
        scheduler.schedule("once", jobs.record, run_at=to_datetime(clock.now_us()) + timedelta(seconds=5), args=["o"])
        scheduler.schedule("windowed", jobs.record, 60.0, args=["w"], end_at=datetime(2030, 1, 1, tzinfo=PARIS_SUMMER))
        scheduler.schedule("slow", jobs.block, 20.0, args=["slow"], jitter_seconds=0.5, overlap="skip")
        scheduler.start()
        clock.advance(21.0)
        assert jobs.gate("slow").started.wait(TIMEOUT)
        scheduler.pause("windowed")
        scheduler.run_now("every")
        wait_until(lambda: _settled(scheduler), message="every run but slow's recorded")
        yield scheduler
    finally:
        jobs.release_all()
        scheduler.shutdown(wait=True, timeout=TIMEOUT)


def _settled(sched: JobScheduler) -> bool:
    """Nothing moves any more (the clock stands still): every due run recorded, "slow" still in flight."""
    runs = sched.runs(limit=1000)
    listed = sched.jobs()
    return (
        [run.job_id for run in runs if run.outcome is None] == ["slow"]
        and {"ok", "error", "missed"} <= {run.outcome for run in runs}
        and all(job.state != JobState.RUNNING for job in listed if job.job_id != "slow")
        and not any(job.run_now_requested for job in listed)
    )


def test_plain_listings_hold_the_values_of_the_public_ones(sched: JobScheduler, store: Store, db_url: str) -> None:
    db_sql(db_url, "UPDATE persched_jobs SET args = 'not json' WHERE job_id = 'caught'")  # a hand edit
    listed = store.list_jobs()
    assert {job.job_id for job in listed} == {"every", "failing", "cron", "caught", "once", "windowed", "slow"}
    assert any(job.unreadable for job in listed)
    assert [_fields(job) for job in store.list_jobs_as(plain_job)] == [dict(job) for job in listed]
    for job in listed:
        got = store.get_job_as(plain_job, job.job_id)
        assert got is not None
        assert _fields(got) == dict(job)
    assert store.get_job_as(plain_job, "nobody") is None
    runs = store.list_runs(limit=1000)
    assert {run.outcome for run in runs} == {"ok", "error", "missed", None}
    assert [_fields(run) for run in store.list_runs_as(plain_run, limit=1000)] == [dict(run) for run in runs]
    assert [_fields(run) for run in store.list_runs_as(plain_run, "failing", 1)] == [
        dict(run) for run in store.list_runs("failing", 1)
    ]
    in_flight = store.runs_in_flight()
    assert [run.job_id for run in in_flight] == ["slow"]
    assert [_fields(run) for run in store.runs_in_flight_as(plain_run)] == [dict(run) for run in in_flight]


def test_a_plain_row_validates_into_the_public_model(sched: JobScheduler, store: Store) -> None:
    # `persched ... --json` prints the public model's dump of a plain row (cli.listing._job_json, _run_json).
    jobs_read = zip(store.list_jobs_as(plain_job), store.list_jobs(), strict=True)
    assert all(Job.model_validate(plain, from_attributes=True) == job for plain, job in jobs_read)
    runs_read = zip(store.list_runs_as(plain_run, limit=1000), store.list_runs(limit=1000), strict=True)
    assert all(Run.model_validate(plain, from_attributes=True) == run for plain, run in runs_read)
