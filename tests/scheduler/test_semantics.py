"""The semantics of docs/reference/behaviour.md, driven by FakeClock: grid, coalescing, no self-overlap,
replace / deschedule linearization, no ABA, error isolation, current_run(),
wall-clock steps, the bounded worker pool, and a concurrency stress test.

With a FakeClock the scheduler's time moves only in `advance()`; due runs then
execute on real worker threads, so after each advance a test waits (bounded)
for the effect before advancing again.

"Probe" jobs prove a negative: the dispatcher claims due entries in due order
on one thread, and a claim inserts the run row, so once a probe due *after*
some instant has run, every claim due before it has already been decided.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobState, Run, current_run
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, finished_runs, wait_finished, wait_until

if TYPE_CHECKING:
    from persched import JobScheduler
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine


def wait_next_run(sched: JobScheduler, job_id: str, expected: datetime) -> None:
    """Wait until the job's next_run_at is `expected` (its run has been completed)."""

    def check() -> bool:
        job = sched.get_job(job_id)
        return job is not None and job.next_run_at == expected

    wait_until(check, message=f"{job_id}.next_run_at == {expected}")


def slots(runs: list[Run]) -> list[datetime]:
    return [r.scheduled_for for r in runs]


# --- the grid -------------------------------------------------------------------------


def test_runs_on_the_grid(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    job = sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert job.next_run_at == at(10)
    for k in (1, 2, 3):
        fake_clock.advance(10.0)
        runs = wait_finished(sched, "a", k)
        assert slots(runs) == [at(10 * i) for i in range(k, 0, -1)]
        assert all(r.outcome == "ok" and r.error is None for r in runs)
        wait_next_run(sched, "a", at(10 * (k + 1)))
    assert len(jobs.calls("a")) == 3
    assert [c.scheduled_for for c in jobs.calls("a")] == [at(10), at(20), at(30)]


def test_nothing_runs_before_it_is_due(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    sched.schedule("probe", jobs.record, 9.5, args=("probe",))
    fake_clock.advance(9.999)
    wait_finished(sched, "probe", 1)
    assert jobs.calls("a") == []
    assert sched.runs("a") == []


def test_args_and_kwargs_reach_the_callable(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 1.0, args=("a", 1, [2, 3]), kwargs={"to": "ops", "n": None})
    fake_clock.advance(1.0)
    wait_finished(sched, "a", 1)
    (call,) = jobs.calls("a")
    assert call.args == (1, [2, 3])
    assert call.kwargs == {"to": "ops", "n": None}


def test_start_in_zero_runs_at_once(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=0)
    runs = wait_finished(sched, "a", 1)
    assert slots(runs) == [at(0)]
    fake_clock.advance(10.0)
    assert slots(wait_finished(sched, "a", 2)) == [at(10), at(0)]


def test_sub_second_interval(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 0.25, args=("a",))
    for k in range(1, 5):
        fake_clock.advance(0.25)
        wait_finished(sched, "a", k)
    assert slots(finished_runs(sched, "a")) == [at(1.0), at(0.75), at(0.5), at(0.25)]


def test_schedule_before_start(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler()
    job = sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert job.next_run_at == at(10)
    assert [j.job_id for j in sched.jobs()] == ["a"]
    sched.start()
    fake_clock.advance(10.0)
    assert slots(wait_finished(sched, "a", 1)) == [at(10)]


def test_schedule_from_another_thread_is_picked_up(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    t = threading.Thread(
        target=sched.schedule, args=("a", jobs.record, 5.0), kwargs={"args": ("a",)}, name="test-sched"
    )
    t.start()
    t.join(TIMEOUT)
    fake_clock.advance(5.0)
    assert slots(wait_finished(sched, "a", 1)) == [at(5)]


# --- coalescing ---------------------------------------------------------------------------


def test_late_slots_coalesce_into_one_run(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(35.0)
    runs = wait_finished(sched, "a", 1)
    assert slots(runs) == [at(30)]
    wait_next_run(sched, "a", at(40))
    fake_clock.advance(5.0)
    runs = wait_finished(sched, "a", 2)
    assert slots(runs) == [at(40), at(30)]
    assert len(jobs.calls("a")) == 2


def test_huge_advance_is_one_run_and_cheap(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """Ten years late with a 1 s interval: one run, no loop over 3e8 slots (FR #12)."""
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 1.0, args=("a",))
    ten_years = 10 * 365 * 86400.0
    fake_clock.advance(ten_years + 0.5)
    runs = wait_finished(sched, "a", 1)
    assert slots(runs) == [at(ten_years)]
    wait_next_run(sched, "a", at(ten_years + 1))
    assert len(sched.runs("a")) == 1


# --- no self-overlap ----------------------------------------------------------------------


def test_job_never_overlaps_itself(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    for _ in range(3):
        fake_clock.advance(10.0)
    # Probe due after the last passed slot: its run proves the dispatcher got there.
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    (only,) = sched.runs("a")
    assert only.outcome is None
    assert only.scheduled_for == at(10)
    job = sched.get_job("a")
    assert job is not None
    assert job.state is JobState.RUNNING
    g.release.set()
    # Exactly one more run, right after, standing for the latest passed slot.
    runs = wait_finished(sched, "a", 2)
    assert slots(runs) == [at(40), at(10)]
    wait_next_run(sched, "a", at(50))
    fake_clock.advance(10.0)
    assert slots(wait_finished(sched, "a", 3)) == [at(50), at(40), at(10)]
    assert len(jobs.calls("a")) == 3


def test_blocked_job_does_not_hold_back_others(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("slow", jobs.block, 10.0, args=("slow",))
    sched.schedule("fast", jobs.record, 10.0, args=("fast",))
    g = jobs.gate("slow")
    for k in (1, 2, 3):
        fake_clock.advance(10.0)
        wait_finished(sched, "fast", k)
    assert g.started.is_set()
    assert len(jobs.calls("slow")) == 1
    # Deschedule is never blocked by a hung run.
    assert sched.deschedule("slow") is True


def test_long_advance_during_a_run_does_not_lose_it(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """A run alive in this process is not declared lost when time jumps past its lease."""
    sched = make_scheduler(start=True, lease_seconds=5.0, heartbeat_seconds=1.0)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(100.0)
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    g.release.set()
    runs = wait_finished(sched, "a", 2)
    assert [r.outcome for r in runs] == ["ok", "ok"]
    assert slots(runs) == [at(110), at(10)]


# --- workers ------------------------------------------------------------------------


def test_one_worker_runs_both_due_jobs_in_turn(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True, workers=1)
    sched.schedule("first", jobs.block, 10.0, args=("first",))
    sched.schedule("second", jobs.record, 10.0, args=("second",), start_in=10.5)
    g = jobs.gate("first")
    fake_clock.advance(10.5)
    assert g.started.wait(TIMEOUT)
    # The only worker is busy: "second" is not even claimed (a worker is
    # reserved before the claim), so it has no run row yet.
    assert jobs.calls("second") == []
    assert sched.runs("second") == []
    g.release.set()
    runs = wait_finished(sched, "second", 1)
    assert slots(runs) == [at(10.5)]
    assert wait_finished(sched, "first", 1)[0].outcome == "ok"
    first, second = jobs.calls("first")[0], jobs.calls("second")[0]
    assert first.thread == second.thread


def test_many_due_jobs_all_run(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True, workers=2)
    ids = [f"j{i}" for i in range(20)]
    for job_id in ids:
        sched.schedule(job_id, jobs.record, 10.0, args=(job_id,))
    fake_clock.advance(10.0)
    for job_id in ids:
        assert slots(wait_finished(sched, job_id, 1)) == [at(10)]


# --- replace ------------------------------------------------------------------------


def test_identical_redeclaration_changes_nothing(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """Re-declaring an unchanged job does not push it back."""
    sched = make_scheduler(start=True)
    first = sched.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"x": 1})
    fake_clock.advance(7.0)
    again = sched.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"x": 1})
    again_by_ref = sched.schedule("a", "tests.support.jobs:record", 10, args=["a"], kwargs={"x": 1})
    for j in (again, again_by_ref, sched.get_job("a")):
        assert j is not None
        assert j.generation == first.generation
        assert j.next_run_at == at(10)
    fake_clock.advance(3.0)
    assert slots(wait_finished(sched, "a", 1)) == [at(10)]


def test_same_id_twice_before_start_is_one_job(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """One row, one heap entry."""
    sched = make_scheduler()
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert [j.job_id for j in sched.jobs()] == ["a"]
    sched.start()
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    assert len(sched.runs("a")) == 1


def test_replacement_gets_new_generation_and_fresh_grid(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    old = sched.schedule("a", jobs.record, 10.0, args=("a", "old"))
    fake_clock.advance(5.0)
    new = sched.schedule("a", jobs.record, 20.0, args=("a", "new"))
    assert new.generation > old.generation
    assert new.next_run_at == at(25)  # fresh grid from now, default start_in = interval
    assert new.interval_seconds == 20.0
    # The old definition's slot at +10 passes; a probe at +10.5 proves it was skipped.
    sched.schedule("probe", jobs.record, 5.5, args=("probe",))
    fake_clock.advance(5.5)
    wait_finished(sched, "probe", 1)
    assert jobs.calls("a") == []
    fake_clock.advance(14.5)
    runs = wait_finished(sched, "a", 1)
    assert slots(runs) == [at(25)]
    assert runs[0].generation == new.generation
    assert [c.args for c in jobs.calls("a")] == [("new",)]


@pytest.mark.parametrize("change", ["target", "args", "kwargs", "interval"])
def test_every_definition_change_is_a_replacement(make_scheduler: SchedulerFactory, change: str) -> None:
    sched = make_scheduler()
    old = sched.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"k": 1})
    if change == "target":
        new = sched.schedule("a", jobs.timed, 10.0, args=("a",), kwargs={"k": 1})
    elif change == "args":
        new = sched.schedule("a", jobs.record, 10.0, args=("a", 2), kwargs={"k": 1})
    elif change == "kwargs":
        new = sched.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"k": 2})
    else:
        new = sched.schedule("a", jobs.record, 11.0, args=("a",), kwargs={"k": 1})
    assert new.generation > old.generation
    assert [j.generation for j in sched.jobs()] == [new.generation]


def test_replacement_while_old_run_in_flight(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """The old run may finish; its completion does not disturb the new definition."""
    sched = make_scheduler(start=True)
    old = sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    new = sched.schedule("a", jobs.record, 10.0, args=("a", "new"))
    assert new.generation > old.generation
    assert new.next_run_at == at(20)
    g.release.set()
    wait_until(lambda: any(r.generation == old.generation and r.outcome == "ok" for r in sched.runs("a")))
    job = sched.get_job("a")
    assert job is not None
    assert (job.generation, job.next_run_at, job.target) == (new.generation, at(20), "tests.support.jobs:record")
    assert job.state is JobState.SCHEDULED
    fake_clock.advance(10.0)
    wait_until(lambda: len(jobs.calls("a")) == 2)
    runs = wait_finished(sched, "a", 2)
    assert [(r.generation, r.scheduled_for) for r in runs] == [(new.generation, at(20)), (old.generation, at(10))]


# --- deschedule ---------------------------------------------------------------------


def test_deschedule_return_value_and_visibility(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    assert sched.deschedule("nope") is False
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert sched.deschedule("a") is True
    assert sched.get_job("a") is None
    assert sched.jobs() == []
    assert sched.deschedule("a") is False


def test_descheduled_job_never_runs(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    assert sched.deschedule("a") is True
    sched.schedule("probe", jobs.record, 30.5, args=("probe",))
    fake_clock.advance(30.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    assert slots(sched.runs("a")) == [at(10)]


def test_deschedule_before_start(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler()
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert sched.deschedule("a") is True
    sched.start()
    sched.schedule("probe", jobs.record, 10.5, args=("probe",))
    fake_clock.advance(10.5)
    wait_finished(sched, "probe", 1)
    assert jobs.calls("a") == []


def test_deschedule_wait_blocks_until_in_flight_run_finished(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    returned = threading.Event()
    result: list[bool] = []

    def deschedule() -> None:
        result.append(sched.deschedule("a", wait=True))
        returned.set()

    t = threading.Thread(target=deschedule, name="test-deschedule", daemon=True)
    t.start()
    wait_until(lambda: sched.get_job("a") is None, message="deschedule committed")
    assert not returned.wait(0.1), "deschedule(wait=True) returned while the run was in flight"
    g.release.set()
    assert returned.wait(TIMEOUT)
    t.join(TIMEOUT)
    assert result == [True]
    assert g.finished.is_set()
    # The run finished, and its outcome is recorded.
    (run,) = sched.runs("a")
    assert run.outcome == "ok"


def test_deschedule_wait_without_run_in_flight_returns(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert sched.deschedule("a", wait=True, timeout=TIMEOUT) is True
    assert sched.deschedule("a", wait=True, timeout=TIMEOUT) is False


def test_deschedule_during_run_lets_it_finish_then_stops(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    assert sched.deschedule("a") is True
    assert sched.get_job("a") is None
    fake_clock.advance(20.0)
    g.release.set()
    wait_until(lambda: g.finished.is_set())
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    wait_until(lambda: [r.outcome for r in sched.runs("a")] == ["ok"])
    assert sched.get_job("a") is None  # the completion did not resurrect it


# --- no ABA -------------------------------------------------------------------------


def test_reschedule_after_deschedule_gets_higher_generation(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    gens = []
    for _ in range(3):
        gens.append(sched.schedule("a", jobs.record, 10.0, args=("a",)).generation)
        assert sched.deschedule("a") is True
    assert gens == sorted(gens)
    assert len(set(gens)) == 3


def test_stale_heap_entry_cannot_claim_later_definition(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    g1 = sched.schedule("a", jobs.record, 10.0, args=("a",)).generation
    assert sched.deschedule("a") is True
    # Identical definition, later first run: the entry due at +10 is stale.
    g2 = sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=20.0).generation
    assert g2 > g1
    sched.schedule("probe", jobs.record, 10.5, args=("probe",))
    fake_clock.advance(10.5)
    wait_finished(sched, "probe", 1)
    assert jobs.calls("a") == []
    fake_clock.advance(9.5)
    runs = wait_finished(sched, "a", 1)
    assert [(r.generation, r.scheduled_for) for r in runs] == [(g2, at(20))]


def test_stale_entry_due_with_the_new_one_cannot_claim_it(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    """Deschedule + re-schedule due at the same instant: the one run is the new generation's."""
    sched = make_scheduler(start=True)
    g1 = sched.schedule("a", jobs.capture_run, 10.0, args=("a",)).generation
    assert sched.deschedule("a") is True
    g2 = sched.schedule("a", jobs.capture_run, 10.0, args=("a",)).generation
    assert g2 > g1
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    assert [(r.generation, r.scheduled_for) for r in sched.runs("a")] == [(g2, at(10))]
    assert [(c.generation, c.scheduled_for) for c in jobs.calls("a")] == [(g2, at(10))]


# --- callables that raise ------------------------------------------------------------


def test_exception_is_recorded_logged_and_job_goes_on(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="persched")
    sched = make_scheduler(start=True, workers=1)
    sched.schedule("bad", jobs.fail, 10.0, args=("bad", "boom-7f3a"))
    fake_clock.advance(10.0)
    (run,) = wait_finished(sched, "bad", 1)
    assert run.outcome == "error"
    assert run.error is not None
    assert "boom-7f3a" in run.error
    job = sched.get_job("bad")
    assert job is not None
    assert job.state is JobState.SCHEDULED
    wait_until(
        lambda: any(
            "boom-7f3a" in r.getMessage() or (r.exc_info is not None and "boom-7f3a" in str(r.exc_info[1]))
            for r in caplog.records
        )
    )
    assert any(r.name.startswith("persched") for r in caplog.records)
    assert "Traceback" in caplog.text
    fake_clock.advance(10.0)
    assert [r.outcome for r in wait_finished(sched, "bad", 2)] == ["error", "error"]


def test_system_exit_is_isolated(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="persched")
    sched = make_scheduler(start=True, workers=1)
    sched.schedule("exit", jobs.exit_with_systemexit, 10.0, args=("exit",))
    fake_clock.advance(10.0)
    (run,) = wait_finished(sched, "exit", 1)
    assert run.outcome == "error"
    assert run.error
    assert "SystemExit" in run.error
    wait_until(lambda: any(r.name.startswith("persched") for r in caplog.records))
    # The only worker survived: another job and the next slot still run.
    sched.schedule("other", jobs.record, 5.0, args=("other",))
    fake_clock.advance(10.0)
    wait_finished(sched, "other", 1)
    assert [r.outcome for r in wait_finished(sched, "exit", 2)] == ["error", "error"]


# --- current_run() -------------------------------------------------------------------


def test_current_run_inside_and_outside(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    assert current_run() is None
    sched = make_scheduler(start=True)
    job = sched.schedule("a", jobs.capture_run, 10.0, args=("a",))
    fake_clock.advance(25.0)
    wait_finished(sched, "a", 1)
    (call,) = jobs.calls("a")
    assert (call.job_id, call.generation, call.scheduled_for) == ("a", job.generation, at(20))
    assert current_run() is None


def test_current_run_is_none_in_main_thread_during_a_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    assert current_run() is None
    (call,) = jobs.calls("a")
    assert call.scheduled_for == at(10)
    g.release.set()


# --- wall-clock steps ---------------------------------------------


def test_wall_step_forward_causes_no_burst(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    fake_clock.step_wall(3600.0)
    for k in (2, 3):
        fake_clock.advance(10.0)
        wait_finished(sched, "a", k)
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    # 360 slots of wall time were skipped; at most one extra (coalesced) run.
    assert len(jobs.calls("a")) <= 4
    runs = sched.runs("a", limit=1000)
    assert len({r.scheduled_for for r in runs}) == len(runs)


def test_wall_step_back_causes_no_stall(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    fake_clock.step_wall(-3600.0)
    for k in (2, 3):
        fake_clock.advance(10.0)
        wait_finished(sched, "a", k)
    runs = sched.runs("a", limit=1000)
    assert len({r.scheduled_for for r in runs}) == len(runs)


def test_wall_step_back_before_start_first_run(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.step_wall(-3600.0)
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)


# --- stress --------------------------------------------------------------------------


STRESS_SCALE: Final = int(os.environ.get("PERSCHED_STRESS_SCALE", "1"))  # CI keeps 1


@dataclass(frozen=True)
class Op:
    """One schedule/deschedule call, with real-time order and fake time at return."""

    kind: str  # "schedule" | "deschedule"
    job_id: str
    generation: int | None  # generation returned by schedule()
    start_ns: int
    end_ns: int
    fake_at_return: datetime


@pytest.mark.stress
def test_concurrent_schedule_deschedule_stress(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, seed: int
) -> None:
    ids = ["s0", "s1", "s2", "s3"]
    intervals = [0.25, 0.5, 1.0]
    sched = make_scheduler(start=True, workers=4)
    ops: list[Op] = []
    ops_lock = threading.Lock()
    stop_clock = threading.Event()
    barrier = threading.Barrier(9, timeout=TIMEOUT)
    errors: list[BaseException] = []

    def actor(n: int) -> None:
        rng = random.Random(seed + n)
        try:
            barrier.wait()
            for _ in range(40 * STRESS_SCALE):
                job_id = rng.choice(ids)
                start = time.perf_counter_ns()
                if rng.random() < 0.6:
                    # Mostly the job's usual interval (an unchanged re-declaration keeps
                    # the grid, so jobs get to run); sometimes another (a replacement).
                    usual = intervals[ids.index(job_id) % len(intervals)]
                    interval = usual if rng.random() < 0.75 else rng.choice(intervals)
                    job = sched.schedule(job_id, jobs.timed, interval, args=(job_id,))
                    kind, gen = "schedule", job.generation
                else:
                    sched.deschedule(job_id)
                    kind, gen = "deschedule", None
                end = time.perf_counter_ns()
                fake_now = datetime.fromtimestamp(fake_clock.now(), tz=at(0).tzinfo)
                with ops_lock:
                    ops.append(Op(kind, job_id, gen, start, end, fake_now))
                # Spread the ops over fake time: wait for the next clock tick.
                seen = fake_clock.now()
                wait_until(lambda: fake_clock.now() > seen, message="clock tick")  # noqa: B023  # called at once
        except BaseException as exc:  # noqa: BLE001  # reported by the main thread
            errors.append(exc)

    def driver() -> None:
        barrier.wait()
        while not stop_clock.is_set():
            # 1/16 s is exact in binary at this epoch, so wall and monotonic agree exactly.
            fake_clock.advance(0.0625)
            stop_clock.wait(0.002)  # pacing only, not synchronisation

    actors = [threading.Thread(target=actor, args=(n,), name=f"test-actor-{n}") for n in range(8)]
    clock_thread = threading.Thread(target=driver, name="test-clock")
    for t in [*actors, clock_thread]:
        t.start()
    for t in actors:
        t.join(TIMEOUT * 3)
    stop_clock.set()
    clock_thread.join(TIMEOUT)
    assert not errors, errors
    assert not any(t.is_alive() for t in actors)

    # Quiesce: time stands still, wait until no run is in flight.
    wait_until(
        lambda: all(r.outcome is not None for i in ids for r in sched.runs(i, limit=10_000)),
        message="no run in flight",
    )
    runs = [r for i in ids for r in sched.runs(i, limit=10_000)]
    assert runs, "the stress test ran nothing"

    # (job_id, generation, scheduled_for) is unique.
    keys = [(r.job_id, r.generation, r.scheduled_for) for r in runs]
    assert len(keys) == len(set(keys))

    # No run of a generation is scheduled after its retirement returned. A
    # generation g is retired at the latest by any deschedule, or any schedule
    # returning another generation, that started after the call creating g returned.
    created: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.kind == "schedule" and op.generation is not None:
            key = (op.job_id, op.generation)
            created[key] = min(created.get(key, op.end_ns), op.end_ns)
    checked = 0
    for (job_id, gen), created_ns in created.items():
        retirements = [
            op.fake_at_return
            for op in ops
            if op.job_id == job_id and op.start_ns > created_ns and (op.kind == "deschedule" or op.generation != gen)
        ]
        if not retirements:
            continue
        retired_at = min(retirements)
        late = [r for r in runs if (r.job_id, r.generation) == (job_id, gen) and r.scheduled_for > retired_at]
        assert not late, f"{job_id} gen {gen} retired at {retired_at} but ran for {late}"
        checked += any((r.job_id, r.generation) == (job_id, gen) for r in runs)
    assert checked > 0, "no retired generation had run: the check above was vacuous"

    # Generations of one job_id only grow in the order their schedule() calls returned.
    for job_id in ids:
        seq = sorted(
            (op.end_ns, op.start_ns, op.generation) for op in ops if op.job_id == job_id and op.generation is not None
        )
        for (end_a, _, gen_a), (_, start_b, gen_b) in itertools.pairwise(seq):
            if start_b > end_a:
                assert gen_b is not None
                assert gen_a is not None
                assert gen_b >= gen_a

    # No two runs of one generation overlapped (real time, seen from inside).
    seen: dict[tuple[str | None, int | None], list[tuple[int, int]]] = {}
    for i in ids:
        for c in jobs.calls(i):
            assert c.end_ns is not None
            seen.setdefault((c.job_id, c.generation), []).append((c.start_ns, c.end_ns))
    for seen_key, spans in seen.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"runs of {seen_key} overlapped"
    # And in the store's own timestamps.
    by_gen: dict[tuple[str, int], list[Run]] = {}
    for r in runs:
        by_gen.setdefault((r.job_id, r.generation), []).append(r)
    for key, rs in by_gen.items():
        rs.sort(key=lambda r: (r.started_at, r.scheduled_for))
        for a, b in itertools.pairwise(rs):
            assert a.finished_at is not None
            assert b.started_at >= a.finished_at, f"runs of {key} overlapped in the store"
