"""Excluded dates on a running scheduler, driven by a FakeClock on every engine
(docs/reference/behaviour.md, "Excluded dates").

The slots `next_runs()` lists before a job goes through an excluded range are
exactly the slots that then run: none on an excluded date, none recorded as
missed, none caught up.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo

import pytest

from persched import JobScheduler, JobSpec
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.every_engine

UTC: Final = timezone.utc
PARIS: Final = ZoneInfo("Europe/Paris")
RECORD: Final = "tests.support.jobs:record"
# 2027-03-26T10:15:23.456789Z: two days before Paris springs forward (2027-03-28, 02:00 -> 03:00).
START: Final = datetime(2027, 3, 26, 10, 15, 23, 456_789, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START.timestamp())


@pytest.fixture
def sched(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    with JobScheduler(db_url, clock=clock) as started:
        yield started


def now_of(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(clock.now(), UTC)


def run_through(sched: JobScheduler, clock: FakeClock, job_id: str, slots: list[datetime]) -> None:
    """Advance the clock to each slot in turn and wait for its run."""
    for n, slot in enumerate(slots, start=1):
        clock.advance((slot - now_of(clock)).total_seconds())
        wait_until(lambda n=n: len(jobs.calls(job_id)) == n, message=f"run {n} of {job_id}")  # type: ignore[misc]
        assert sched.wait_idle(TIMEOUT)


def test_an_interval_job_runs_exactly_the_slots_listed_across_an_excluded_range(
    sched: JobScheduler, clock: FakeClock
) -> None:
    job = sched.schedule("tick", RECORD, 6 * 3600.0, args=("tick",), exclude=["2027-03-27/2027-03-28"])
    assert job.exclude == ("2027-03-27/2027-03-28",)
    listed = sched.next_runs("tick", count=5)
    assert [slot.date() for slot in listed] == [date(2027, 3, 26)] * 2 + [date(2027, 3, 29)] * 3
    assert listed[2] == datetime(2027, 3, 29, 4, 15, 23, 456_789, tzinfo=UTC)  # the grid's phase, kept
    run_through(sched, clock, "tick", listed)
    runs = sched.runs("tick")
    assert sorted(r.scheduled_for for r in runs) == listed
    assert {r.outcome for r in runs} == {"ok"}  # nothing recorded as missed


def test_a_cron_job_across_a_daylight_saving_change_skips_its_excluded_date(
    sched: JobScheduler, clock: FakeClock
) -> None:
    # 02:30 does not exist on the 28th in Paris (it would run at 03:00 CEST): that day is excluded.
    sched.schedule(
        "nightly", RECORD, cron="30 2 * * *", timezone="Europe/Paris", args=("nightly",), exclude=["2027-03-28"]
    )
    listed = sched.next_runs("nightly", count=3)
    assert [slot.astimezone(PARIS).isoformat() for slot in listed] == [
        "2027-03-27T02:30:00+01:00",
        "2027-03-29T02:30:00+02:00",
        "2027-03-30T02:30:00+02:00",
    ]
    run_through(sched, clock, "nightly", listed)
    assert sorted(r.scheduled_for for r in sched.runs("nightly")) == listed


def test_catch_up_after_a_jump_runs_no_excluded_slot(sched: JobScheduler, clock: FakeClock) -> None:
    sched.schedule(
        "hourly",
        RECORD,
        3600.0,
        args=("hourly",),
        misfire="catch_up",
        max_catch_up=50,
        exclude=["2027-03-27"],
    )
    listed = sched.next_runs("hourly", count=20)
    # Every slot up to the 28th's 02:15:23 comes due at once: each runs, one after another, oldest first.
    clock.advance((datetime(2027, 3, 28, 2, 30, tzinfo=UTC) - now_of(clock)).total_seconds())
    due = [slot for slot in listed if slot <= now_of(clock)]
    assert len(due) == 13 + 3  # the 26th from 11:15 to 23:15, then the 28th from 00:15
    wait_until(lambda: len(jobs.calls("hourly")) == len(due), message="every slot caught up")
    assert sched.wait_idle(TIMEOUT)
    runs = sched.runs("hourly")
    assert sorted(r.scheduled_for for r in runs) == due
    assert {r.outcome for r in runs} == {"ok"}


def test_a_fixed_delay_job_waits_past_an_excluded_date(sched: JobScheduler, clock: FakeClock) -> None:
    # 10:15:23 plus 14 h is on the 27th: the first run waits for the 28th's first instant (UTC here).
    sched.schedule(
        "delay",
        RECORD,
        14 * 3600.0,
        recurrence="fixed_delay",
        args=("delay",),
        exclude=[date(2027, 3, 27), "2027-03-29"],
    )
    listed = [datetime(2027, 3, 28, tzinfo=UTC), datetime(2027, 3, 28, 14, tzinfo=UTC)]  # its runs take no time
    assert sched.next_runs("delay") == listed[:1]
    run_through(sched, clock, "delay", listed)
    # 14 h after the second run ends is on the 29th: the next waits for the 30th.
    assert sched.next_runs("delay") == [datetime(2027, 3, 30, tzinfo=UTC)]


def test_a_changed_list_replaces_the_job_and_the_same_list_keeps_it(sched: JobScheduler) -> None:
    first = sched.schedule("j", RECORD, 60.0, exclude=["2027-12-25", "2027-12-24/2027-12-26"])
    same = sched.schedule("j", RECORD, 60.0, exclude=["2027-12-24/2027-12-26", date(2027, 12, 25), "2027-12-25"])
    assert same.generation == first.generation
    assert same.next_run_at == first.next_run_at
    changed = sched.schedule("j", RECORD, 60.0, exclude=["2027-12-25"])
    assert changed.generation == first.generation + 1
    assert changed.exclude == ("2027-12-25",)
    cleared = sched.schedule("j", RECORD, 60.0)
    assert cleared.generation == first.generation + 2
    assert cleared.exclude is None
    got = sched.get_job("j")
    assert got is not None
    assert got.exclude is None


def test_a_bad_entry_writes_nothing(sched: JobScheduler) -> None:
    with pytest.raises(InvalidJobError, match=r"^exclude: entry 1 '2027-02-30'") as raised:
        sched.schedule("j", RECORD, 60.0, exclude=["2027-12-25", "2027-02-30"])
    assert raised.value.argument == "exclude"
    assert sched.get_job("j") is None


def test_declare_keeps_an_unchanged_list_and_replaces_a_changed_one(sched: JobScheduler) -> None:
    def spec(*entries: object) -> list[JobSpec]:
        return [JobSpec("declared", RECORD, 60.0, exclude=list(entries))]

    assert sched.declare(spec("2027-12-25")).created == ("declared",)
    assert sched.declare(spec(date(2027, 12, 25))).unchanged == ("declared",)
    assert sched.declare(spec("2027-12-24/2027-12-26")).replaced == ("declared",)
    with pytest.raises(InvalidJobError, match=r"^specs\['declared'\]\.exclude: entry 0 True is not a date"):
        sched.declare(spec(True))
    job = sched.get_job("declared")
    assert job is not None
    assert job.exclude == ("2027-12-24/2027-12-26",)
