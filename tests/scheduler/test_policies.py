"""Black-box through the public API and driven by FakeClock: cron
with time zones and daylight saving, clock jumps, misfire (coalesce, skip,
catch_up), fixed delay, overlap, jitter, the start/end window, pause and
resume, run_now, the overrun watch, async callables, validation, and
re-declaration.

With a FakeClock the scheduler's time moves only in `advance()`; due runs then
execute on real worker threads, so after each advance a test waits (bounded)
for the effect before advancing again. "Probe" jobs prove a negative, as in
test_semantics: the dispatcher claims due entries in due order on one thread,
and a claim inserts the run row, so once a probe due at some instant has run,
every claim due by then has been decided.
"""

from __future__ import annotations

import itertools
import logging
import queue
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import Event, Job, JobState, Run
from persched.errors import InvalidJobError, SchedulerStateError
from persched.testing import FakeClock
from tests.support import jobs, policy_jobs
from tests.support.helpers import TIMEOUT, at, wait_until

if TYPE_CHECKING:
    from persched import JobScheduler
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

UTC: Final = timezone.utc
TEN_YEARS: Final = 10 * 365 * 86400.0

_probe_ids = itertools.count()


# --- helpers -------------------------------------------------------------------------


def utc(text: str) -> datetime:
    """An aware UTC datetime from ``"YYYY-MM-DDTHH:MM"``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def job_of(sched: JobScheduler, job_id: str) -> Job:
    job = sched.get_job(job_id)
    assert job is not None, f"{job_id} is not listed"
    return job


def done(sched: JobScheduler, job_id: str) -> list[Run]:
    """Runs that executed the callable and finished ("ok" or "error"), newest first."""
    return [r for r in sched.runs(job_id, limit=10_000) if r.outcome in ("ok", "error")]


def missed(sched: JobScheduler, job_id: str) -> list[Run]:
    """The "missed" records of `job_id`, newest first."""
    return [r for r in sched.runs(job_id, limit=10_000) if r.outcome == "missed"]


def slots(runs: list[Run]) -> list[datetime]:
    return [r.scheduled_for for r in runs]


def wait_done(sched: JobScheduler, job_id: str, n: int) -> list[Run]:
    """Wait until `job_id` has at least `n` finished executions; return them, newest first."""
    wait_until(lambda: len(done(sched, job_id)) >= n, message=f"{n} finished runs of {job_id}")
    return done(sched, job_id)


def wait_next_run(sched: JobScheduler, job_id: str, expected: datetime) -> None:
    """Wait until the job's next_run_at is `expected` and no run of it is in flight."""

    def check() -> bool:
        job = sched.get_job(job_id)
        return job is not None and job.state is not JobState.RUNNING and job.next_run_at == expected

    wait_until(check, message=f"{job_id}.next_run_at == {expected}")


def wait_settled(sched: JobScheduler, job_id: str, run_count: int) -> Job:
    """Wait until `run_count` runs of the job were recorded and none is in flight; return the job."""

    def check() -> bool:
        job = sched.get_job(job_id)
        return job is not None and job.state is not JobState.RUNNING and job.run_count >= run_count

    wait_until(check, message=f"{job_id} settled after {run_count} runs")
    return job_of(sched, job_id)


def settle(sched: JobScheduler, clock: FakeClock, seconds: float = 0.5) -> None:
    """Advance the clock by `seconds` and wait until a probe due at the new instant has run."""
    key = f"probe-{next(_probe_ids)}"
    sched.schedule(key, jobs.record, seconds, args=(key,))
    clock.advance(seconds)
    wait_until(lambda: len(jobs.calls(key)) >= 1, message=f"probe {key}")
    sched.deschedule(key)


# --- cron, time zones and daylight saving -------------------------------------------

# Expected slots (UTC) of a daily job from the day before a transition to two days
# after, checked with zoneinfo: the first is the day before, the second the
# transition day, the last is where next_run_at stands at the end.
DST_CASES: Final = [
    # 02:30 does not exist on 2026-03-29 in Paris (02:00 CET -> 03:00 CEST at 01:00 UTC):
    # it fires once, at 03:00 CEST = 01:00 UTC (croniter 6 says 03:30 CEST = 01:30 UTC).
    pytest.param(
        "Europe/Paris",
        "30 2 * * *",
        ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30", "2026-03-31T00:30"],
        id="paris-spring-forward",
    ),
    # 02:30 occurs twice on 2026-10-25 in Paris (03:00 CEST -> 02:00 CET at 01:00 UTC):
    # once, at the first, 02:30 CEST = 00:30 UTC (not again at 02:30 CET = 01:30 UTC).
    pytest.param(
        "Europe/Paris",
        "30 2 * * *",
        ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30", "2026-10-27T01:30"],
        id="paris-fall-back",
    ),
    # 02:30 does not exist on 2026-03-08 in New York (02:00 EST -> 03:00 EDT at 07:00 UTC).
    pytest.param(
        "America/New_York",
        "30 2 * * *",
        ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30", "2026-03-10T06:30"],
        id="new-york-spring-forward",
    ),
    # New York repeats 01:00-02:00 on 2026-11-01, so 02:30 occurs once: 02:30 EST = 07:30 UTC.
    pytest.param(
        "America/New_York",
        "30 2 * * *",
        ["2026-10-31T06:30", "2026-11-01T07:30", "2026-11-02T07:30", "2026-11-03T07:30"],
        id="new-york-fall-back-02:30",
    ),
    # ... and 01:30 occurs twice: once, at the first, 01:30 EDT = 05:30 UTC (not 01:30 EST = 06:30 UTC).
    pytest.param(
        "America/New_York",
        "30 1 * * *",
        ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30", "2026-11-03T06:30"],
        id="new-york-fall-back-01:30",
    ),
]


@pytest.mark.parametrize(("zone", "cron", "expected"), DST_CASES)
def test_cron_daylight_saving_rules(
    make_scheduler: SchedulerFactory, zone: str, cron: str, expected: list[str]
) -> None:
    wanted = [utc(s) for s in expected]
    clock = FakeClock(start=wanted[0].replace(hour=0, minute=0).timestamp())  # the day before, 00:00 UTC
    sched = make_scheduler(clock=clock, start=True)
    job = sched.schedule("daily", jobs.record, args=("daily",), cron=cron, timezone=zone)
    assert job.next_run_at == wanted[0]
    for n, slot in enumerate(wanted[:-1], start=1):
        clock.advance(slot.timestamp() - clock.now())
        job = wait_settled(sched, "daily", n)
        assert job.next_run_at == wanted[n], f"after the run for {slot}"
    runs = done(sched, "daily")
    assert slots(runs) == wanted[-2::-1]
    assert [r.started_at for r in runs] == wanted[-2::-1]
    assert [c.scheduled_for for c in jobs.calls("daily")] == wanted[:-1]


def test_cron_shortcut_is_kept_as_written_and_runs_at_midnight(make_scheduler: SchedulerFactory) -> None:
    """`@daily` is a job's cron as written (in `Job`, `persched jobs`); it fires at 00:00 in its zone."""
    clock = FakeClock(start=utc("2026-03-28T21:13").timestamp() + 0.25)
    sched = make_scheduler(clock=clock, start=True)
    job = sched.schedule("daily", jobs.record, args=("daily",), cron="@daily", timezone="Europe/Paris")
    assert (job.cron, job.schedule) == ("@daily", "cron @daily Europe/Paris")
    assert job.next_run_at == utc("2026-03-28T23:00")  # 00:00 CET
    clock.advance(utc("2026-03-28T23:00").timestamp() - clock.now())
    job = wait_settled(sched, "daily", 1)
    assert job.next_run_at == utc("2026-03-29T22:00")  # 00:00 CEST, after spring forward
    assert sched.schedule("daily", jobs.record, args=("daily",), cron="@DAILY", timezone="Europe/Paris") == job


def test_cron_fall_back_jump_over_both_occurrences_is_one_run(make_scheduler: SchedulerFactory) -> None:
    """Paris 2026-10-25: 02:30 CEST (00:30 UTC) is the slot; 02:30 CET (01:30 UTC) is not,
    also when the clock jumps over both at once (the coalesced run stands for the first)."""
    clock = FakeClock(start=utc("2026-10-25T00:00").timestamp())
    sched = make_scheduler(clock=clock, start=True)
    sched.schedule("daily", jobs.record, args=("daily",), cron="30 2 * * *", timezone="Europe/Paris")
    clock.advance(105 * 60.0)  # 01:45 UTC, past both 02:30s
    job = wait_settled(sched, "daily", 1)
    assert job.next_run_at == utc("2026-10-26T01:30")
    assert slots(done(sched, "daily")) == [utc("2026-10-25T00:30")]


@pytest.mark.parametrize(
    "now",
    [
        pytest.param("2026-10-25T00:45", id="first-pass-02:45-CEST"),
        pytest.param("2026-10-25T01:10", id="second-pass-02:10-CET"),
        pytest.param("2026-10-25T01:45", id="second-pass-02:45-CET"),
    ],
)
def test_cron_scheduled_during_the_repeated_hour_skips_the_second_occurrence(
    make_scheduler: SchedulerFactory, now: str
) -> None:
    """Paris 2026-10-25 02:00-03:00 local happens twice; its 02:30 fired at the first pass
    (00:30 UTC), so a job scheduled during either pass next fires the day after."""
    clock = FakeClock(start=utc(now).timestamp())
    sched = make_scheduler(clock=clock, start=True)
    job = sched.schedule("daily", jobs.record, args=("daily",), cron="30 2 * * *", timezone="Europe/Paris")
    assert job.next_run_at == utc("2026-10-26T01:30")
    settle(sched, clock)
    assert sched.runs("daily") == []


# --- a ten-year clock jump ------------------------------------------------------------


@pytest.mark.parametrize("how", ["cron-minutely", "interval-1ms"])
def test_ten_year_jump_is_one_coalesced_run(make_scheduler: SchedulerFactory, fake_clock: FakeClock, how: str) -> None:
    """One run for the latest slot, found without a loop over every missed slot
    (bounded by the TIMEOUT of the waits: a walk over 5e6 minutes or 3e11 ms would not end)."""
    sched = make_scheduler(start=True)
    if how == "cron-minutely":
        fake_clock.advance(30.0)
        job = sched.schedule("j", jobs.record, args=("j",), cron="* * * * *")
        assert job.next_run_at == at(60)
        fake_clock.advance(TEN_YEARS)  # now: TEN_YEARS + 30 s; EPOCH and TEN_YEARS are whole minutes
        latest, following = at(TEN_YEARS), at(TEN_YEARS + 60)
    else:
        job = sched.schedule("j", jobs.record, 0.001, args=("j",))
        assert job.next_run_at == at(0.001)
        fake_clock.advance(TEN_YEARS)
        latest, following = at(TEN_YEARS), at(TEN_YEARS + 0.001)
    (run,) = wait_done(sched, "j", 1)
    assert run.scheduled_for == latest
    assert run.outcome == "ok"
    wait_next_run(sched, "j", following)
    settle(sched, fake_clock, 0.0005 if how == "interval-1ms" else 0.5)
    assert len(sched.runs("j")) == 1
    assert len(jobs.calls("j")) == 1


@pytest.mark.parametrize(
    ("how", "misfire", "ran", "dropped"),
    [
        # cron: now is 30 s after the latest slot, later than the 1 s grace.
        pytest.param("cron-minutely", "skip", [], (60, TEN_YEARS, TEN_YEARS // 60), id="cron-skip"),
        pytest.param(
            "cron-minutely",
            "catch_up",
            [TEN_YEARS - 120, TEN_YEARS - 60, TEN_YEARS],
            (60, TEN_YEARS - 180, TEN_YEARS // 60 - 3),
            id="cron-catch_up",
        ),
        # 1 ms interval: now is exactly on the latest slot, so that one is on time.
        pytest.param(
            "interval-1ms", "skip", [TEN_YEARS], (0.001, TEN_YEARS - 0.001, 315_359_999_999), id="interval-skip"
        ),
        pytest.param(
            "interval-1ms",
            "catch_up",
            [TEN_YEARS - 0.002, TEN_YEARS - 0.001, TEN_YEARS],
            (0.001, TEN_YEARS - 0.003, 315_359_999_997),
            id="interval-catch_up",
        ),
    ],
)
def test_ten_year_jump_with_skip_or_catch_up_costs_one_record(
    make_scheduler: SchedulerFactory,
    fake_clock: FakeClock,
    how: str,
    misfire: str,
    ran: list[float],
    dropped: tuple[float, float, float],
) -> None:
    """A long downtime costs O(1): one "missed" record stands for the dropped range
    (its count may be None when counting would cost too much)."""
    sched = make_scheduler(start=True)
    options: dict[str, Any] = {"misfire": misfire}
    if misfire == "catch_up":
        options["max_catch_up"] = 3
    if how == "cron-minutely":
        fake_clock.advance(30.0)
        sched.schedule("j", jobs.record, args=("j",), cron="* * * * *", **options)
        following = at(TEN_YEARS + 60)
    else:
        sched.schedule("j", jobs.record, 0.001, args=("j",), **options)
        following = at(TEN_YEARS + 0.001)
    fake_clock.advance(TEN_YEARS)
    wait_until(lambda: len(missed(sched, "j")) >= 1, message="a missed record")
    wait_next_run(sched, "j", following)
    runs = wait_done(sched, "j", len(ran))
    assert slots(runs) == [at(t) for t in reversed(ran)]
    (rec,) = missed(sched, "j")
    first, last, count = dropped
    assert (rec.scheduled_for, rec.missed_until) == (at(first), at(last))
    assert rec.missed_count in (None, int(count))


# --- misfire ----------------------------------------------------------------------------


def test_misfire_skip_drops_slots_missed_while_down(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    first.schedule("s", jobs.record, 10.0, args=("s",), misfire="skip")
    fake_clock.advance(10.0)
    wait_done(first, "s", 1)
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(45.0)  # slots 20, 30, 40, 50 pass while down; now is 5 s after the last
    second = make_scheduler(start=True)
    wait_until(lambda: len(missed(second, "s")) >= 1, message="a missed record")
    wait_next_run(second, "s", at(60))
    (rec,) = missed(second, "s")
    assert (rec.scheduled_for, rec.missed_until, rec.missed_count) == (at(20), at(50), 4)
    assert slots(done(second, "s")) == [at(10)]
    fake_clock.advance(5.0)
    assert slots(wait_done(second, "s", 2)) == [at(60), at(10)]
    assert len(missed(second, "s")) == 1
    assert [c.scheduled_for for c in jobs.calls("s")] == [at(10), at(60)]


def test_misfire_skip_still_runs_a_slot_within_grace(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    first.schedule("s", jobs.record, 10.0, args=("s",), misfire="skip", grace_seconds=3.0)
    fake_clock.advance(10.0)
    wait_done(first, "s", 1)
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(32.0)  # slots 20 and 30 are missed; 40 is 2 s late, within the 3 s grace
    second = make_scheduler(start=True)
    runs = wait_done(second, "s", 2)
    assert slots(runs) == [at(40), at(10)]
    assert runs[0].started_at == at(42)
    (rec,) = missed(second, "s")
    assert (rec.scheduled_for, rec.missed_until, rec.missed_count) == (at(20), at(30), 2)
    wait_next_run(second, "s", at(50))


def test_misfire_catch_up_runs_the_most_recent_slots_oldest_first(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    first = make_scheduler(start=True)
    first.schedule("c", jobs.record, 10.0, args=("c",), misfire="catch_up", max_catch_up=3)
    fake_clock.advance(10.0)
    wait_done(first, "c", 1)
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(100.5)  # ten slots, 20 .. 110, pass while down
    second = make_scheduler(start=True)
    runs = wait_done(second, "c", 4)
    wait_next_run(second, "c", at(120))
    runs = done(second, "c")
    assert slots(runs) == [at(110), at(100), at(90), at(10)]
    assert [c.scheduled_for for c in jobs.calls("c")] == [at(10), at(90), at(100), at(110)]
    # One after another, never overlapping.
    for earlier, later in itertools.pairwise(reversed(runs)):
        assert earlier.finished_at is not None
        assert later.started_at >= earlier.finished_at
    (rec,) = missed(second, "c")
    assert (rec.scheduled_for, rec.missed_until, rec.missed_count) == (at(20), at(80), 7)


# --- recurrence --------------------------------------------------------------------------


def test_fixed_delay_counts_from_the_end_of_the_previous_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("d", jobs.block, 10.0, args=("d",), recurrence="fixed_delay")
    g = jobs.gate("d")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(24.5)
    settle(sched, fake_clock)  # now 35: a grid would have had slots at 20 and 30
    assert len(sched.runs("d")) == 1
    g.release.set()
    (run,) = wait_done(sched, "d", 1)
    assert run.finished_at == at(35)
    wait_next_run(sched, "d", at(45))
    fake_clock.advance(9.5)
    settle(sched, fake_clock)  # now 45
    runs = wait_done(sched, "d", 2)
    assert slots(runs) == [at(45), at(10)]
    assert runs[0].started_at == at(45)


# --- overlap -------------------------------------------------------------------------------


def test_overlap_skip_drops_slots_that_pass_during_a_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("o", jobs.block, 10.0, args=("o",), overlap="skip")
    g = jobs.gate("o")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(34.5)
    settle(sched, fake_clock)  # now 45: slots 20, 30, 40 passed during the run
    assert len(sched.runs("o")) == 1
    g.release.set()
    wait_until(lambda: len(missed(sched, "o")) >= 1, message="a missed record")
    wait_next_run(sched, "o", at(50))
    (rec,) = missed(sched, "o")
    assert (rec.scheduled_for, rec.missed_until, rec.missed_count) == (at(20), at(40), 3)
    settle(sched, fake_clock, 1.0)  # now 46
    assert slots(done(sched, "o")) == [at(10)]
    fake_clock.advance(4.0)
    assert slots(wait_done(sched, "o", 2)) == [at(50), at(10)]
    assert len(jobs.calls("o")) == 2


def test_overlap_forbid_coalesces_slots_into_one_run_right_after(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("o", jobs.block, 10.0, args=("o",), overlap="forbid")
    g = jobs.gate("o")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(34.5)
    settle(sched, fake_clock)  # now 45: slots 20, 30, 40 passed during the run
    assert len(sched.runs("o")) == 1
    g.release.set()
    runs = wait_done(sched, "o", 2)
    assert slots(runs) == [at(40), at(10)]
    assert runs[0].started_at == at(45)
    wait_next_run(sched, "o", at(50))
    assert missed(sched, "o") == []
    assert len(jobs.calls("o")) == 2


# --- jitter ------------------------------------------------------------------------------------


@pytest.mark.parametrize("misfire", ["coalesce", "skip"])
def test_jitter_delays_each_run_within_range_off_a_fixed_grid(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, misfire: str
) -> None:
    """Time moves in steps of 1/4 s, each proved settled by a tick job, so a run starts
    at the first step at or after its slot + offset: that is in [0, J] after its slot.
    With misfire "skip" and a grace shorter than J, jitter must not make a run "late"."""
    jitter, step, interval, n = 2.0, 0.25, 5.0, 12
    sched = make_scheduler(start=True)
    sched.schedule("tick", jobs.record, step, args=("tick",))
    job = sched.schedule(
        "jit",
        jobs.record,
        interval,
        args=("jit",),
        jitter_seconds=jitter,
        misfire=misfire,  # type: ignore[arg-type]  # a Misfire literal from the parameter
        grace_seconds=0.5,
    )
    assert job.next_run_at == at(interval)
    now, ticks = 0.0, 0

    def advance(seconds: float) -> None:
        nonlocal now, ticks
        fake_clock.advance(seconds)
        now += seconds
        ticks += 1
        wait_until(lambda: len(jobs.calls("tick")) >= ticks, message=f"tick {ticks}")

    offsets: list[float] = []
    for k in range(1, n + 1):
        slot = k * interval
        advance(slot - now)
        while len(sched.runs("jit")) < k:
            assert now < slot + jitter, f"no run for slot {slot} by slot + jitter"
            advance(step)
        job = wait_settled(sched, "jit", k)
        assert job.next_run_at == at(slot + interval)
        run = sched.runs("jit", limit=1)[0]
        assert run.outcome == "ok"
        assert run.scheduled_for == at(slot)
        offsets.append((run.started_at - run.scheduled_for).total_seconds())
    assert all(0 <= d <= jitter for d in offsets), offsets
    assert len(set(offsets)) >= 3, f"jitter does not vary: {offsets}"
    assert missed(sched, "jit") == []
    assert [c.scheduled_for for c in jobs.calls("jit")] == [at(k * interval) for k in range(1, n + 1)]


# --- the window ------------------------------------------------------------------------------------


def test_window_runs_between_start_at_and_end_at_then_finishes(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    job = sched.schedule("w", jobs.record, 10.0, args=("w",), start_at=at(100), end_at=at(135))
    assert job.next_run_at == at(100)
    fake_clock.advance(99.0)
    settle(sched, fake_clock)  # now 99.5
    assert sched.runs("w") == []
    fake_clock.advance(0.5)
    wait_done(sched, "w", 1)
    for k in (2, 3, 4):
        fake_clock.advance(10.0)
        wait_done(sched, "w", k)
    wait_until(lambda: job_of(sched, "w").state is JobState.FINISHED, message="w finished")
    fake_clock.advance(30.0)
    settle(sched, fake_clock)
    assert slots(done(sched, "w")) == [at(130), at(120), at(110), at(100)]
    assert len(jobs.calls("w")) == 4
    (listed,) = [j for j in sched.jobs() if j.job_id == "w"]
    assert listed.state is JobState.FINISHED
    assert job_of(sched, "w").state is JobState.FINISHED


def test_start_at_in_the_past_anchors_the_interval_grid(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    """The grid starts at start_at: slots start_at + k * 7 s, ..., -4, 3, 10, ... from now."""
    sched = make_scheduler(start=True)
    job = sched.schedule("w", jobs.record, 7.0, args=("w",), start_at=at(-95))
    assert job.next_run_at == at(3)
    fake_clock.advance(3.0)
    wait_done(sched, "w", 1)
    wait_next_run(sched, "w", at(10))
    fake_clock.advance(7.0)
    assert slots(wait_done(sched, "w", 2)) == [at(10), at(3)]


# --- pause and resume --------------------------------------------------------------------------------


def test_pause_stops_runs_and_resume_continues_from_now(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("p", jobs.record, 10.0, args=("p",))
    fake_clock.advance(10.0)
    wait_done(sched, "p", 1)
    wait_next_run(sched, "p", at(20))
    assert sched.pause("p") is True
    job = job_of(sched, "p")
    assert job.state is JobState.PAUSED
    assert job.paused is True
    fake_clock.advance(34.5)
    settle(sched, fake_clock)  # now 45: slots 20, 30, 40 passed while paused
    assert slots(done(sched, "p")) == [at(10)]
    assert len(jobs.calls("p")) == 1
    assert sched.resume("p") is True
    job = job_of(sched, "p")
    assert job.state is JobState.SCHEDULED
    assert job.next_run_at == at(50)
    settle(sched, fake_clock, 1.0)  # now 46: the passed slots are not run on resume
    assert slots(done(sched, "p")) == [at(10)]
    fake_clock.advance(4.0)
    assert slots(wait_done(sched, "p", 2)) == [at(50), at(10)]
    assert len(jobs.calls("p")) == 2


def test_paused_job_stays_paused_across_a_restart(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    first.schedule("p", jobs.record, 10.0, args=("p",))
    assert first.pause("p") is True
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(25.0)
    second = make_scheduler(start=True)
    assert job_of(second, "p").state is JobState.PAUSED
    settle(second, fake_clock)  # now 25.5: slots 10 and 20 passed
    assert second.runs("p") == []
    assert jobs.calls("p") == []
    assert second.resume("p") is True
    assert job_of(second, "p").next_run_at == at(30)
    fake_clock.advance(4.5)
    assert slots(wait_done(second, "p", 1)) == [at(30)]


# --- run_now ---------------------------------------------------------------------------------------------


def test_run_now_runs_once_now_without_moving_the_grid(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("r", jobs.capture_run, 10.0, args=("r",))
    fake_clock.advance(3.0)
    assert sched.run_now("r") is True
    (run,) = wait_done(sched, "r", 1)
    assert (run.scheduled_for, run.started_at, run.run_now) == (at(3), at(3), True)
    assert [c.scheduled_for for c in jobs.calls("r")] == [at(3)]
    wait_next_run(sched, "r", at(10))
    assert job_of(sched, "r").run_now_requested is False
    settle(sched, fake_clock)  # now 3.5: one extra run, not two
    assert len(sched.runs("r")) == 1
    fake_clock.advance(6.5)
    runs = wait_done(sched, "r", 2)
    assert [(r.scheduled_for, r.run_now) for r in runs] == [(at(10), False), (at(3), True)]


def test_run_now_on_a_paused_job_is_refused(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("r", jobs.record, 10.0, args=("r",))
    assert sched.pause("r") is True
    with pytest.raises(SchedulerStateError):
        sched.run_now("r")
    assert job_of(sched, "r").run_now_requested is False
    settle(sched, fake_clock)
    assert sched.runs("r") == []


def test_run_now_during_a_run_with_overlap_forbid_runs_right_after(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("r", jobs.block, 10.0, args=("r",), overlap="forbid")
    g = jobs.gate("r")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(2.0)
    assert sched.run_now("r") is True
    settle(sched, fake_clock)  # now 12.5
    assert len(sched.runs("r")) == 1
    assert len(jobs.calls("r")) == 1
    g.release.set()
    runs = wait_done(sched, "r", 2)
    extra, first = runs
    assert first.finished_at == at(12.5)
    assert extra.run_now is True
    assert extra.started_at == at(12.5)
    assert at(12) <= extra.scheduled_for <= at(12.5)
    wait_next_run(sched, "r", at(20))
    fake_clock.advance(7.5)
    runs = wait_done(sched, "r", 3)
    assert [(r.scheduled_for, r.run_now) for r in runs[:1]] == [(at(20), False)]
    assert len(jobs.calls("r")) == 3


def test_run_now_during_a_run_with_overlap_skip_is_dropped(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("r", jobs.block, 10.0, args=("r",), overlap="skip")
    g = jobs.gate("r")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(2.0)
    assert sched.run_now("r") is False
    assert job_of(sched, "r").run_now_requested is False
    g.release.set()
    wait_done(sched, "r", 1)
    wait_next_run(sched, "r", at(20))
    settle(sched, fake_clock)  # now 12.5
    assert len(sched.runs("r")) == 1
    fake_clock.advance(7.5)
    runs = wait_done(sched, "r", 2)
    assert [(r.scheduled_for, r.run_now) for r in runs] == [(at(20), False), (at(10), False)]
    assert len(jobs.calls("r")) == 2


# --- the overrun watch ---------------------------------------------------------------------------------


def test_overrun_is_logged_emitted_and_recorded(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler(start=True)
    seen: queue.Queue[Event] = queue.Queue()
    sched.add_listener(seen.put, kinds=["run_overran"])
    sched.schedule("slow", jobs.block, 60.0, args=("slow",), max_runtime_seconds=5.0)
    g = jobs.gate("slow")
    with caplog.at_level(logging.WARNING, logger="persched"):
        fake_clock.advance(60.0)
        assert g.started.wait(TIMEOUT)
        fake_clock.advance(4.5)
        assert seen.empty()
        assert sched.runs("slow")[0].overran is False
        fake_clock.advance(0.5)  # now 65: the run has been going for 5 s
        event = seen.get(timeout=TIMEOUT)
        assert (event.kind, event.job_id) == ("run_overran", "slow")
        assert event.run is not None
        assert event.run.scheduled_for == at(60)
        assert event.run.overran is True
        wait_until(lambda: sched.runs("slow")[0].overran, message="overran recorded")
        (running,) = sched.runs("slow")
        assert running.outcome is None

        def warned() -> bool:
            return any(
                r.name.startswith("persched") and r.levelno == logging.WARNING and "slow" in r.getMessage()
                for r in caplog.records
            )

        wait_until(warned, message="a WARNING about the overrun")
    g.release.set()
    (run,) = wait_done(sched, "slow", 1)
    assert (run.outcome, run.overran) == ("ok", True)
    assert seen.empty()


def test_run_within_max_runtime_is_not_flagged(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    seen: queue.Queue[Event] = queue.Queue()
    sched.add_listener(seen.put, kinds=["run_overran"])
    sched.schedule("quick", jobs.record, 60.0, args=("quick",), max_runtime_seconds=5.0)
    fake_clock.advance(60.0)
    wait_done(sched, "quick", 1)
    wait_next_run(sched, "quick", at(120))
    fake_clock.advance(10.0)
    settle(sched, fake_clock)
    (run,) = done(sched, "quick")
    assert run.overran is False
    assert seen.empty()


# --- async callables --------------------------------------------------------------------------------------


def test_async_callable_is_awaited_and_sees_current_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    job = sched.schedule("co", policy_jobs.async_capture, 10.0, args=("co",))
    assert job.target == "tests.support.policy_jobs:async_capture"
    fake_clock.advance(10.0)
    (run,) = wait_done(sched, "co", 1)
    assert (run.outcome, run.error) == ("ok", None)
    (call,) = jobs.calls("co")
    assert (call.job_id, call.generation, call.scheduled_for) == ("co", job.generation, at(10))
    assert call.thread.startswith("persched-worker-")
    wait_next_run(sched, "co", at(20))
    fake_clock.advance(10.0)
    assert slots(wait_done(sched, "co", 2)) == [at(20), at(10)]
    assert [c.scheduled_for for c in jobs.calls("co")] == [at(10), at(20)]


def test_async_callable_that_raises_is_an_error_and_keeps_its_schedule(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("cofail", "tests.support.policy_jobs:async_fail", 10.0, args=("cofail", "async boom"))
    fake_clock.advance(10.0)
    (run,) = wait_done(sched, "cofail", 1)
    assert run.outcome == "error"
    assert run.error is not None
    assert "RuntimeError" in run.error
    assert "async boom" in run.error
    assert len(jobs.calls("cofail")) == 1  # awaited: it got past its first await
    wait_next_run(sched, "cofail", at(20))
    job = job_of(sched, "cofail")
    assert (job.state, job.error_count) == (JobState.SCHEDULED, 1)
    fake_clock.advance(10.0)
    runs = wait_done(sched, "cofail", 2)
    assert [(r.scheduled_for, r.outcome) for r in runs] == [(at(20), "error"), (at(10), "error")]


# --- validation at schedule() ---------------------------------------------------------------------------------


NAIVE: Final = datetime(2027, 2, 1)  # no tzinfo: ambiguous, refused
INVALID_CASES: Final = [
    pytest.param({"cron": "61 * * * *"}, {"cron"}, "minute", id="cron-bad-minute"),
    pytest.param({"cron": "0 3 * 13 *"}, {"cron"}, "month", id="cron-bad-month"),
    pytest.param({"cron": "0 3 * *"}, {"cron"}, "field", id="cron-four-fields"),
    pytest.param({"cron": "0 3 * * *", "timezone": "Mars/Olympus_Mons"}, {"timezone"}, "", id="unknown-zone"),
    pytest.param({"interval_seconds": 10.0, "start_at": NAIVE}, {"start_at"}, "", id="naive-start_at"),
    pytest.param({"interval_seconds": 10.0, "start_at": at(100), "end_at": at(50)}, {"end_at"}, "", id="end-first"),
    pytest.param(
        {"interval_seconds": 10.0, "misfire": "catch_up", "max_catch_up": 0}, {"max_catch_up"}, "", id="catch_up-0"
    ),
    pytest.param({"interval_seconds": 10.0, "misfire": "catch_up"}, {"max_catch_up"}, "", id="catch_up-no-max"),
    pytest.param({"interval_seconds": 10.0, "cron": "0 3 * * *"}, {"interval_seconds", "cron"}, "", id="both"),
    pytest.param({}, {"interval_seconds", "cron"}, "", id="neither"),
]


@pytest.mark.parametrize(("options", "arguments", "word"), INVALID_CASES)
def test_invalid_policy_is_refused_and_writes_nothing(
    make_scheduler: SchedulerFactory, options: dict[str, Any], arguments: set[str], word: str
) -> None:
    sched = make_scheduler()
    sched.schedule("keep", jobs.record, 10.0, args=("keep",))
    before = sched.jobs()
    for job_id in ("keep", "fresh"):
        with pytest.raises(InvalidJobError) as info:
            sched.schedule(job_id, jobs.record, args=(job_id,), **options)
        assert info.value.argument in arguments, str(info.value)
        assert word in str(info.value)
    assert sched.jobs() == before
    assert sched.get_job("fresh") is None


# --- re-declaration -----------------------------------------------------------------------------------------------


CRON_JOB: Final[dict[str, Any]] = {"cron": "*/5 * * * *", "timezone": "Europe/Paris", "misfire": "skip"}


def test_identical_cron_redeclaration_keeps_generation_and_next_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler()
    first = sched.schedule("c", jobs.record, args=("c",), **CRON_JOB)
    assert first.next_run_at == at(0)  # EPOCH is 09:00 in Paris: a slot at now counts
    fake_clock.advance(100.0)
    again = sched.schedule("c", jobs.record, args=("c",), **CRON_JOB)
    assert (again.generation, again.next_run_at) == (first.generation, at(0))
    assert job_of(sched, "c") == first


@pytest.mark.parametrize(
    "change",
    [
        {"misfire": "coalesce"},
        {"misfire": "catch_up", "max_catch_up": 2},
        {"overlap": "skip"},
        {"jitter_seconds": 1.0},
        {"grace_seconds": 5.0},
        {"timezone": "America/New_York"},
        {"cron": "*/10 * * * *"},
        {"max_runtime_seconds": 60.0},
        {"start_at": at(3600)},
        {"end_at": at(86400)},
    ],
    ids=lambda change: ",".join(change),
)
def test_changed_policy_replaces_the_job(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, change: dict[str, Any]
) -> None:
    sched = make_scheduler()
    first = sched.schedule("c", jobs.record, args=("c",), **CRON_JOB)
    fake_clock.advance(100.0)
    new = sched.schedule("c", jobs.record, args=("c",), **{**CRON_JOB, **change})
    assert new.generation == first.generation + 1
    for name, value in change.items():
        assert getattr(new, name) == value
    assert job_of(sched, "c") == new
    assert new.next_run_at >= at(100)  # a fresh grid from now
    assert new.next_run_at - at(100) <= timedelta(hours=1)
