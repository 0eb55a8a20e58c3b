"""Deterministic races of pause, resume and run-now (each linearizes at its commit).

Like tests/scheduler/test_races.py: time comes only from `FakeClock`, the
interleaving is forced by seams that hold a store call before or after its
commit, and each race also runs against a deliberately broken variant
(``xfail(strict=True)``) so that a test that cannot fail shows up as XPASS.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched import JobState
from persched._store import Claim, ClaimMiss, Store
from persched.errors import JobNotFoundError, SchedulerStateError
from tests.scheduler.test_races import broken, claim_seam, job_state, probe, run_rows
from tests.support import jobs, race_jobs
from tests.support.helpers import TIMEOUT, at, finished_runs, wait_until
from tests.support.race_jobs import Seam, batch_claims
from tests.support.seams import patch_store, store_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

NO_PAUSED = race_jobs.claim_without("paused")


def store_seam(
    seams: list[Seam],
    store: Store,
    method: str,
    impl: Callable[..., Any] | None = None,
    *,
    before: bool = False,
    after: bool = False,
) -> Seam:
    """A seam around `store.<method>` (or around `impl`, a broken variant taking the store first)."""
    real = functools.partial(getattr(type(store), method) if impl is None else impl, store)
    seam = Seam(real, before=before, after=after)
    seams.append(seam)
    return seam


# --- pause vs claim -----------------------------------------------------------------


@pytest.mark.parametrize(
    "impl",
    [None, broken("broken-claim-ignores-pause", NO_PAUSED, "a paused job starts")],
    ids=["correct", "broken"],
)
def test_pause_commits_before_the_claim_so_the_run_never_starts(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    impl: Any,  # noqa: ANN401
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", impl, before=True)
    with patch_store(sched, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # the dispatcher is about to claim
        assert sched.pause("a") is True  # ... and the pause commits first
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert isinstance(seam.results[0], ClaimMiss)
        probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []
    assert run_rows(sched, "a") == []
    job = sched.get_job("a")
    assert job is not None
    assert (job.state, job.paused) == (JobState.PAUSED, True)


def test_claim_commits_before_pause_so_that_run_finishes_and_no_other_starts(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", after=True)
    gate = jobs.gate("a")
    with patch_store(sched, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.block, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.returned.wait(TIMEOUT)  # the claim committed, not yet handed to a worker
        assert isinstance(seam.results[0], Claim)
        assert sched.pause("a") is True
        running = sched.get_job("a")
        assert running is not None
        assert (running.state, running.paused) == (JobState.RUNNING, True)
        seam.go_after()
        assert gate.started.wait(TIMEOUT)  # claimed before the pause: it may still start
        fake_clock.advance(25.0)  # slots pass while it runs and while it is paused
        gate.release.set()
        wait_until(lambda: run_rows(sched, "a") == [(1, "ok")], message="the claimed run finished")
        probe(sched, fake_clock, 30.0)
    assert run_rows(sched, "a") == [(1, "ok")]  # nothing after the pause
    assert job_state(sched, "a") == "scheduled"
    job = sched.get_job("a")
    assert job is not None
    assert job.state is JobState.PAUSED


# --- resume vs deschedule -------------------------------------------------------------


@pytest.mark.parametrize(
    "resume_impl",
    [None, broken("broken-resume-by-job-id", race_jobs.resume_by_job_id_only, "resume brings a descheduled job back")],
    ids=["correct", "broken"],
)
def test_deschedule_commits_before_resume_so_the_job_stays_gone(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    resume_impl: Callable[..., Any] | None,
) -> None:
    sched = make_scheduler(start=True)
    store = store_of(sched)
    seam = store_seam(seams, store, "resume_job", resume_impl, before=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert sched.pause("a") is True
    with patch.object(store, "resume_job", side_effect=seam):
        results: list[bool | JobNotFoundError] = []

        def resume() -> None:
            try:
                results.append(sched.resume("a"))
            except JobNotFoundError as exc:
                results.append(exc)

        t = threading.Thread(target=resume)
        t.start()
        assert seam.entered.wait(TIMEOUT)  # resume is about to write
        assert sched.deschedule("a") is True  # ... and the deschedule commits first
        seam.go()
        t.join(TIMEOUT)
    # resume() comes after the deschedule: there is no job "a" to resume any more.
    assert [(type(r), getattr(r, "descheduled", None)) for r in results] == [(JobNotFoundError, True)]
    probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []
    assert job_state(sched, "a") == "descheduled"
    assert sched.get_job("a") is None


def test_resume_commits_before_deschedule_so_its_queued_entry_never_starts(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock
) -> None:
    """resume() committed and is about to queue the job when the deschedule commits:
    the entry it queues is stale, and its claim must fail."""
    sched = make_scheduler(start=True)
    store = store_of(sched)
    seam = store_seam(seams, store, "resume_job", after=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert sched.pause("a") is True
    with patch.object(store, "resume_job", side_effect=seam):
        results: list[bool] = []
        t = threading.Thread(target=lambda: results.append(sched.resume("a")))
        t.start()
        assert seam.returned.wait(TIMEOUT)  # resume committed, its entry not yet queued
        assert sched.deschedule("a") is True
        seam.go_after()
        t.join(TIMEOUT)
    assert results == [True]
    probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []
    assert job_state(sched, "a") == "descheduled"


# --- run-now vs pause -----------------------------------------------------------------


@pytest.mark.parametrize(
    "run_now_impl",
    [None, broken("broken-run-now-ignores-pause", race_jobs.run_now_ignoring_pause, "run_now on a paused job")],
    ids=["correct", "broken"],
)
def test_pause_commits_before_run_now_so_run_now_is_refused(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    run_now_impl: Callable[..., Any] | None,
) -> None:
    sched = make_scheduler(start=True)
    store = store_of(sched)
    seam = store_seam(seams, store, "request_run_now", run_now_impl, before=True)
    sched.schedule("a", jobs.record, 100.0, args=("a",))
    with patch.object(store, "request_run_now", side_effect=seam):
        errors: list[BaseException] = []

        def run_now() -> None:
            try:
                sched.run_now("a")
            except SchedulerStateError as exc:
                errors.append(exc)

        t = threading.Thread(target=run_now)
        t.start()
        assert seam.entered.wait(TIMEOUT)
        assert sched.pause("a") is True
        seam.go()
        t.join(TIMEOUT)
    assert len(errors) == 1
    assert "paused" in str(errors[0])
    probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []


@pytest.mark.parametrize(
    "impl",
    [
        None,
        broken(
            # Two defences hold here (the claim checks the pause, and the pause clears the
            # request): the broken variant removes both.
            "broken-claim-ignores-pause-and-pause-keeps-run-now",
            NO_PAUSED,
            "a run-now request starts a paused job",
        ),
    ],
    ids=["correct", "broken"],
)
def test_run_now_commits_before_pause_so_the_extra_run_never_starts(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    impl: Any,  # noqa: ANN401
) -> None:
    """run_now() committed its request and queued it; the pause commits before the claim."""
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", impl, before=True)
    pause = None if impl is None else functools.partial(race_jobs.pause_keeping_run_now, store_of(sched))
    with (
        patch_store(sched, "claim_runs", side_effect=batch_claims(seam)),
        patch_store(sched, "pause_job", side_effect=pause, autospec=False) if pause else contextlib.nullcontext(),
    ):
        sched.schedule("a", jobs.record, 100.0, args=("a",))
        assert sched.run_now("a") is True
        assert seam.entered.wait(TIMEOUT)  # the dispatcher is about to claim the extra run
        assert sched.pause("a") is True
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert isinstance(seam.results[0], ClaimMiss)
        probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []
    job = sched.get_job("a")
    assert job is not None
    assert (job.state, job.run_now_requested) == (JobState.PAUSED, False)  # the pause cleared the request
    # Resumed, the job continues on its grid; the dropped request does not come back.
    assert sched.resume("a") is True
    fake_clock.advance(1.0)
    probe(sched, fake_clock, 1.0)
    assert jobs.calls("a") == []
    fake_clock.advance(100.0)
    wait_until(lambda: len(finished_runs(sched, "a")) == 1, message="the grid run after resume")
    assert [c.scheduled_for for c in jobs.calls("a")] == [at(100)]
