"""Time is exact to the microsecond, and the clock traps (docs/reference/behaviour.md, "Time").

The first test is the one a new user writes first ("every 60 s; advance 60 s; it ran
once"), at many start instants (the real time now, odd fractions) and intervals. Each
trap test below failed on the float-seconds code; its docstring says what was seen there.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler, JobState
from persched._model.instant import Micros, from_datetime, micros, to_datetime
from persched._store import ClaimMiss
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, sql
from tests.support.seams import store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from persched import Run

INTERVALS = (0.1, 1 / 3, 0.7, 7.3, 60.0, 86_400.000001, 0.000001, 0.0000015, 2.5e-5, 3599.999999, 1e-3, 123.456789)
_rng = random.Random(20261201)
# FakeClock() and 19 odd instants: the grid's arithmetic at any anchor is a property of
# tests/unit/test_interval_grid.py; here each start is a whole scheduler (0.4 s of CPU).
STARTS = [None, *(1_700_000_000 + _rng.random() * 1e8 for _ in range(19))]
HOUR = 3600.0


@pytest.mark.parametrize("start", STARTS, ids=["now", *(f"{s:.7f}" for s in STARTS[1:] if s is not None)])
def test_advancing_by_exactly_the_interval_runs_exactly_once_more(tmp_path: Path, start: float | None) -> None:
    """The user's first test, for a dozen intervals at 20 start instants: 3 advances by
    exactly the interval -> exactly 3 runs, run k at ``first + k * interval``."""
    clock = FakeClock(start)
    with JobScheduler(tmp_path / "jobs.db", clock=clock) as sched:
        for n, interval in enumerate(INTERVALS):
            key = f"job{n}"
            first = from_datetime(sched.schedule(key, jobs.record, interval, args=(key,)).next_run_at)
            for k in range(1, 4):
                clock.advance(interval)
                assert sched.wait_idle(TIMEOUT)
                assert len(jobs.calls(key)) == k, f"interval {interval!r}, after advance {k}"
            scheduled = [r.scheduled_for for r in reversed(sched.runs(key))]
            assert scheduled == [to_datetime(first + k * micros(interval)) for k in range(3)]
            sched.deschedule(key)


def test_an_interval_is_rounded_once_to_whole_microseconds(tmp_path: Path) -> None:
    with JobScheduler(tmp_path / "jobs.db", clock=FakeClock(1_700_000_000.1234567)) as sched:
        assert sched.schedule("third", jobs.record, 1 / 3, args=("third",)).interval_seconds == 0.333333


def test_skip_with_no_grace_runs_every_slot_taken_up_on_time(tmp_path: Path) -> None:
    """misfire="skip", grace_seconds=0: seen missing 20 of 20 slots on a FakeClock."""
    clock = FakeClock(1_700_000_000.1234567)
    with JobScheduler(tmp_path / "jobs.db", clock=clock) as sched:
        sched.schedule("s", jobs.record, 0.7, args=("s",), misfire="skip", grace_seconds=0)
        for _ in range(20):
            clock.advance(0.7)
            assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("s")) == 20
        assert [r.outcome for r in sched.runs("s")] == ["ok"] * 20


def test_skip_with_no_grace_on_the_real_clock_does_not_drop_every_slot(tmp_path: Path) -> None:
    """The same on the real clock: the dispatcher's own wake-up and commit latency does not
    make a slot it took up on time late (seen: every slot dropped with 0 s, 30% with 1 ms)."""
    with JobScheduler(tmp_path / "jobs.db") as sched:
        sched.schedule("s", jobs.record, 0.05, args=("s",), misfire="skip", grace_seconds=0, start_in=0)
        deadline = time.monotonic() + TIMEOUT
        while len(jobs.calls("s")) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        sched.deschedule("s", wait=True)
        outcomes = Counter(r.outcome for r in sched.runs("s", limit=1000))
    assert outcomes["ok"] >= 10, outcomes


def _run_slots(url: str) -> list[tuple[str, int, str]]:
    """Every (job_id, generation, scheduled_for) that ran on the grid."""
    rows = sql(url, "SELECT job_id, generation, scheduled_for FROM persched_runs WHERE NOT run_now")
    return [(j, g, s) for j, g, s in rows]


def test_a_restart_after_a_clock_that_was_ahead_resumes_within_one_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Seen: a 500 ms job silent for an hour after a one-hour correction."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    real = 1_700_000_000.123457
    ahead = FakeClock(real + HOUR)
    with JobScheduler(url, clock=ahead) as sched:
        sched.schedule("fast", jobs.record, 0.5, args=("fast",))
        sched.schedule("cron", jobs.record, cron="*/10 * * * * *", args=("cron",))  # every 10 s
        sched.schedule("held", jobs.record, 0.5, args=("held",))
        for _ in range(40):
            ahead.advance(0.5)
            assert sched.wait_idle(TIMEOUT)
        assert sched.pause("held")
    ran_ahead = {key: len(jobs.calls(key)) for key in ("fast", "cron", "held")}
    corrected = FakeClock(real + 20)  # the clock was put right; the process restarted
    with caplog.at_level(logging.WARNING, logger="persched"), JobScheduler(url, clock=corrected) as sched:
        warned = [r.getMessage() for r in caplog.records if "further ahead than its schedule allows" in r.message]
        assert any("job fast:" in m and " 1 h " in m for m in warned), warned  # the size of the correction
        assert any("job cron:" in m and " 1 h " in m for m in warned), warned
        assert any("job held:" in m for m in warned), warned  # a paused row is corrected too
        assert sched.resume("held")
        corrected.advance(0.5)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("fast")) == ran_ahead["fast"] + 1  # within one interval
        assert len(jobs.calls("held")) == ran_ahead["held"] + 1  # a resume is not silenced either
        corrected.advance(10)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("cron")) == ran_ahead["cron"] + 1  # at its next fire after now
        fast = sched.get_job("fast")
        assert fast is not None
        assert fast.state is JobState.SCHEDULED
        assert fast.generation == 1  # its generation: the slots that ran early are passed by
    slots = _run_slots(url)
    assert len(slots) == len(set(slots)), "a (generation, scheduled_for) ran twice"


def test_a_correction_never_runs_an_instant_twice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A process ten minutes ahead ran six slots of the real future; after a restart on the right
    clock the job runs again within one interval, each instant on its grid once: the six that
    ran early are passed by when their time comes (docs/reference/behaviour.md#clock-corrections-across-a-restart)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    real = 1_700_000_000.123457
    ahead = FakeClock(real + 600)
    with JobScheduler(url, clock=ahead) as sched:
        sched.schedule("x", jobs.record, 10, args=("x",))
        for _ in range(6):
            ahead.advance(10)
            assert sched.wait_idle(TIMEOUT)
    early = {r.scheduled_for for r in _runs_of(url)}
    assert len(early) == 6
    corrected = FakeClock(real + 20)
    with caplog.at_level(logging.WARNING, logger="persched"), JobScheduler(url, clock=corrected) as sched:
        for _ in range(70):  # to real + 720: past the six that ran early
            corrected.advance(10)
            assert sched.wait_idle(TIMEOUT)
    runs = _runs_of(url)
    slots = Counter(r.scheduled_for for r in runs)
    assert [slot for slot, n in slots.items() if n > 1] == []  # (job_id, scheduled_for) once, whatever the generation
    later = sorted(r.scheduled_for for r in runs if r.scheduled_for not in early)
    assert len(later) == 58 + 6  # real + 30 ... real + 600, then real + 670 ... real + 720
    assert [r.generation for r in runs] == [1] * len(runs)
    passed_by = [r.getMessage() for r in caplog.records if "has run already" in r.getMessage()]
    assert len(passed_by) == 1, passed_by  # the six early slots passed by at once


def _runs_of(url: str) -> list[Run]:
    reader = JobScheduler(url)  # never started: it only reads
    try:
        return [r for r in reader.runs("x", limit=1000) if r.outcome == "ok"]
    finally:
        reader.shutdown()


def test_a_resume_on_a_clock_behind_never_goes_back_to_a_slot_that_ran(tmp_path: Path) -> None:
    """Seen: pause + resume right after a run put next_run_at back on that slot; the claim hit
    the unique index, the whole batch was retried every second, a 60 s job ran once in ten minutes."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(1_700_000_000.654321)
    with JobScheduler(url, clock=clock) as sched:
        sched.schedule("j", jobs.record, 60, args=("j",))
        clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
        ran = sched.runs("j")[0].scheduled_for
        shell = JobScheduler(url, clock=FakeClock(clock.now() - 5))  # another process, 5 s behind
        try:
            assert shell.pause("j")
            assert shell.resume("j")
        finally:
            shell.shutdown()
        job = sched.get_job("j")
        assert job is not None
        assert job.next_run_at == to_datetime(from_datetime(ran) + micros(60))
        clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("j")) == 2
        assert [r.outcome for r in sched.runs("j")] == ["ok", "ok"]


def test_a_claim_that_fails_for_one_job_is_settled_for_that_job_alone(tmp_path: Path) -> None:
    """Seen: one row put back on a slot that ran failed the whole batch, every job in it,
    retried once a second (one job never holds back another)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(1_700_000_000.777777)
    with JobScheduler(url, clock=clock) as sched:
        for key in ("bad", "good"):
            sched.schedule(key, jobs.record, 10, args=(key,))
        clock.advance(10)
        assert sched.wait_idle(TIMEOUT)
    ran = sql(url, "SELECT scheduled_for FROM persched_runs WHERE job_id = 'bad'")[0][0]
    sql(url, "UPDATE persched_jobs SET next_run_at = ? WHERE job_id = 'bad'", (ran,))  # back on the slot that ran
    clock.advance(5)
    sched = JobScheduler(url, clock=clock)
    try:
        sched.schedule("late", jobs.record, 10, args=("late",), start_in=0)  # claimed in one batch with "bad"
        sched.start()
        assert sched.wait_idle(TIMEOUT)
        assert (len(jobs.calls("bad")), len(jobs.calls("late")), len(jobs.calls("good"))) == (1, 1, 1)
        clock.advance(5)
        assert sched.wait_idle(TIMEOUT)
        assert (len(jobs.calls("bad")), len(jobs.calls("good"))) == (2, 2)  # "bad" moved on past it, alone
    finally:
        sched.shutdown()
    slots = _run_slots(url)
    assert len(slots) == len(set(slots))


def test_a_legacy_clock_in_float_seconds_still_works(tmp_path: Path) -> None:
    """A `Clock` written for persched before microsecond clocks (now()/monotonic() in seconds)."""

    class SecondsOnly:
        def __init__(self) -> None:
            self.inner = FakeClock(1_700_000_000.5)

        def now(self) -> float:
            return self.inner.now()

        def monotonic(self) -> float:
            return self.inner.monotonic()

        def wait(self, cond: object, timeout: float | None) -> None:
            self.inner.wait(cond, timeout)  # type: ignore[arg-type]  # a Condition

    clock = SecondsOnly()
    with JobScheduler(tmp_path / "jobs.db", clock=clock) as sched:
        sched.schedule("legacy", jobs.record, 2, args=("legacy",))
        clock.inner.advance(2)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("legacy")) == 1


def test_a_first_slot_placed_far_ahead_on_purpose_is_not_corrected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """start_in or start_at far beyond one interval is the user's wish, not a clock that was ahead
    (found by the state machine: a restart moved a start_in=3 s, 1 s job into a new generation)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(1_700_000_000.424242)
    start_at = to_datetime(micros(clock.now() + 7200))
    with JobScheduler(url, clock=clock) as sched:
        later = sched.schedule("later", jobs.record, 1, args=("later",), start_in=3600)
        window = sched.schedule("window", jobs.record, 1, args=("window",), start_at=start_at)
    clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="persched"), JobScheduler(url, clock=clock) as sched:
        assert sched.get_job("later") == later
        assert sched.get_job("window") == window
    assert not [r for r in caplog.records if "ahead" in r.getMessage()]


def test_a_correction_never_moves_a_job_before_its_start_at(tmp_path: Path) -> None:
    """docs/how-to/schedules.md, "Window": no run before start_at, also when the row was written by a clock an
    hour ahead and a restart corrects it (found by review: all three kinds ran 7 days early)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    real = 1_700_000_000.313131
    start_at = to_datetime(micros(real + 7 * 86_400))
    ahead = FakeClock(real + HOUR)
    with JobScheduler(url, clock=ahead) as sched:
        sched.schedule("rate", jobs.record, 10, args=("rate",), start_at=start_at)
        sched.schedule("delay", jobs.record, 10, args=("delay",), start_at=start_at, recurrence="fixed_delay")
        sched.schedule("cron", jobs.record, cron="0 * * * *", args=("cron",), start_at=start_at)
        ahead.advance(60)  # rows touched by the clock that is ahead
    corrected = FakeClock(real + 60)
    with JobScheduler(url, clock=corrected) as sched:
        corrected.advance(2 * HOUR)
        assert sched.wait_idle(TIMEOUT)
        assert [len(jobs.calls(key)) for key in ("rate", "delay", "cron")] == [0, 0, 0]
        assert all(job.next_run_at >= start_at for job in sched.jobs())


# -- found by an adversarial review of the above (each failed before its fix) ----------------------


def test_a_slot_picked_up_late_is_not_taken_up_on_time(tmp_path: Path) -> None:
    """A job scheduled elsewhere whose slot is 4 s old when the heartbeat picks it up was not
    waited for: with misfire="skip" it is missed, also while the dispatcher slept for another job."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(1_700_000_000.111111)
    with JobScheduler(url, clock=clock, pickup_seconds=1.0) as sched:
        sched.schedule("daily", jobs.record, 86_400, args=("daily",))  # the dispatcher sleeps for this one
        other = JobScheduler(url, clock=clock)  # another process: never started
        try:
            other.schedule("x", jobs.record, 10, args=("x",), start_in=1, misfire="skip", grace_seconds=0.5)
        finally:
            other.shutdown()
        clock.advance(5)  # the heartbeat picks x up with its slot 4 s old
        assert wait_for(lambda: bool(sched.runs("x")))
        assert [r.outcome for r in sched.runs("x")] == ["missed"]
        assert jobs.calls("x") == []


def test_a_row_moved_on_and_then_touched_by_the_corrected_clock_is_still_corrected(tmp_path: Path) -> None:
    """A pause from a shell on the corrected clock rewrote updated_at; the row must still be put right."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    real = 1_700_000_000.222222
    ahead = FakeClock(real + 86_400)
    with JobScheduler(url, clock=ahead) as sched:
        sched.schedule("j", jobs.record, 60, args=("j",))
        ahead.advance(60)
        assert sched.wait_idle(TIMEOUT)
    corrected = FakeClock(real + 30)
    shell = JobScheduler(url, clock=corrected)
    try:
        assert shell.pause("j")
    finally:
        shell.shutdown()
    with JobScheduler(url, clock=corrected) as sched:
        assert sched.resume("j")
        corrected.advance(60)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("j")) == 2


def test_skew_between_live_instances_is_not_a_correction(tmp_path: Path) -> None:
    """An instance 5 s ahead ran a slot; one with the right clock starting just after must not run that
    instant again in a new generation (skew moves runs, never runs a slot twice)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    t = 1_700_000_000.333333
    ahead = FakeClock(t + 5)
    with JobScheduler(url, clock=ahead) as b:
        b.schedule("x", jobs.record, 60, args=("x",))
        ahead.advance(60)
        assert b.wait_idle(TIMEOUT)
    right = FakeClock(t + 60.5)
    with JobScheduler(url, clock=right) as a:
        right.advance(5)
        assert a.wait_idle(TIMEOUT)
        assert [(r.generation, r.outcome) for r in a.runs("x")] == [(1, "ok")]


def test_a_fixed_delay_slot_that_ran_already_moves_on_one_interval(tmp_path: Path) -> None:
    """Seen: 221 "has run already" warnings a second and no run (the claim left next_run_at on it)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    clock = FakeClock(1_700_000_000.444444)
    with JobScheduler(url, clock=clock) as sched:
        sched.schedule("d", jobs.record, 60, args=("d",), recurrence="fixed_delay")
        clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
    ran = sql(url, "SELECT scheduled_for FROM persched_runs WHERE job_id = 'd'")[0][0]
    sql(url, "UPDATE persched_jobs SET next_run_at = ? WHERE job_id = 'd'", (ran,))
    with JobScheduler(url, clock=clock) as sched:
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("d")) == 1
        clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("d")) == 2


def wait_for(predicate: Callable[[], bool]) -> bool:
    """Poll `predicate` for up to TIMEOUT real seconds (a pick-up runs on the heartbeat thread)."""
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_run_left_in_flight_by_a_clock_that_was_ahead_is_recovered_onto_a_corrected_grid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review D4: a process a day ahead claimed a run and died; the row was 'running', so start-up left
    it alone, and recovery put the job back on the ahead grid: silent for a day."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    real = 1_700_000_000.555555
    ahead = FakeClock(real + 86_400)
    dead = JobScheduler(url, clock=ahead)
    try:
        job = dead.schedule("j", jobs.record, 60, args=("j",))
        ahead.advance(60)
        slot = from_datetime(job.next_run_at)
        claim = claim_one(store_of(dead), "j", job.generation, slot, slot, "dead", Micros(1_000_000))
        assert not isinstance(claim, ClaimMiss), claim  # in flight, and never finished
    finally:
        dead.shutdown()
    clock = FakeClock(real + 30)  # the corrected clock: the restart
    with (
        caplog.at_level(logging.WARNING, logger="persched"),
        JobScheduler(url, clock=clock, lease_seconds=1.0, heartbeat_seconds=0.2, pickup_seconds=0.2) as sched,
    ):

        def recovered() -> bool:
            clock.advance(0.2)  # leases expire by observation on this scheduler's (fake) clock
            return any(r.outcome == "lost" for r in sched.runs("j"))

        assert wait_for(recovered)
        assert any("job j: the lost run's next slot" in r.getMessage() for r in caplog.records)
        moved = sched.get_job("j")
        assert moved is not None
        assert moved.generation == 1
        assert from_datetime(moved.next_run_at) - micros(clock.now()) <= micros(60)  # within one interval of now
        clock.advance(60)
        assert wait_for(lambda: len(jobs.calls("j")) >= 1)
        assert sched.wait_idle(TIMEOUT)  # its outcome is recorded
        outcomes = [(r.generation, r.outcome) for r in reversed(sched.runs("j"))]
        assert outcomes[0] == (1, "lost")
        assert len(outcomes) >= 2, outcomes
        assert all(o == (1, "ok") for o in outcomes[1:]), outcomes
