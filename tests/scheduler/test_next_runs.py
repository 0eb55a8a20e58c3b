"""next_runs(): the coming slots as the job will run them, driven by a FakeClock on every engine.

The slots listed are compared with the slots that then run: across a
daylight-saving change (the spring-forward day's 02:30 in Paris does not
exist and runs at 03:00), within a window, and after a pause with an end.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched.errors import InvalidJobError, JobNotFoundError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.every_engine

UTC: Final = timezone.utc
RECORD: Final = "tests.support.jobs:record"
# 2027-03-26T12:00:00.25Z: two days before Paris springs forward (2027-03-28, 02:00 -> 03:00).
SPRING: Final = datetime(2027, 3, 26, 12, 0, 0, 250_000, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(SPRING.timestamp())


@pytest.fixture
def sched(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    with JobScheduler(db_url, clock=clock) as started:
        yield started


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_slots_listed_are_the_slots_that_run_across_a_daylight_saving_change(
    sched: JobScheduler, clock: FakeClock
) -> None:
    sched.schedule("nightly", RECORD, cron="30 2 * * *", timezone="Europe/Paris", args=("nightly",))
    listed = sched.next_runs("nightly", count=4)
    assert listed == [
        utc("2027-03-27T01:30"),  # 02:30 CET
        utc("2027-03-28T01:00"),  # 02:30 does not exist that day: 03:00 CEST
        utc("2027-03-29T00:30"),  # 02:30 CEST
        utc("2027-03-30T00:30"),
    ]
    for n, slot in enumerate(listed, start=1):
        clock.advance((slot - datetime.fromtimestamp(clock.now(), UTC)).total_seconds())
        wait_until(lambda n=n: len(jobs.calls("nightly")) == n, message=f"run {n}")  # type: ignore[misc]
        assert sched.wait_idle(TIMEOUT)
    assert sorted(r.scheduled_for for r in sched.runs("nightly")) == listed


def test_the_window_ends_the_list_and_a_finished_job_has_none(sched: JobScheduler, clock: FakeClock) -> None:
    start = datetime.fromtimestamp(clock.now(), UTC)
    sched.schedule("short", RECORD, 60.0, args=("short",), end_at=start + timedelta(seconds=150))
    assert sched.next_runs("short") == [start + timedelta(seconds=60), start + timedelta(seconds=120)]
    clock.advance(180.0)
    wait_until(lambda: sched.next_runs("short") == [], message="the window ended")


def test_a_pause_with_an_end_lists_the_slots_after_it_and_one_without_lists_none(
    sched: JobScheduler, clock: FakeClock
) -> None:
    start = datetime.fromtimestamp(clock.now(), UTC)
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    sched.pause("tick", until=start + timedelta(seconds=25.5))
    listed = sched.next_runs("tick", count=3)
    assert listed == [start + timedelta(seconds=s) for s in (30, 40, 50)]
    clock.advance(30.0)
    wait_until(lambda: len(jobs.calls("tick")) == 1, message="the first slot after the pause")
    assert [r.scheduled_for for r in sched.runs("tick")] == listed[:1]
    sched.pause("tick")
    assert sched.next_runs("tick") == []


@pytest.mark.parametrize("count", [0, -1, 1001, True, 1.5, "3"])
def test_a_bad_count_is_refused(sched: JobScheduler, count: object) -> None:
    sched.schedule("tick", RECORD, 10.0, args=("tick",))
    with pytest.raises(InvalidJobError) as raised:
        sched.next_runs("tick", count=count)  # type: ignore[arg-type]
    assert raised.value.argument == "count"


def test_an_unknown_job_is_not_found(sched: JobScheduler) -> None:
    with pytest.raises(JobNotFoundError):
        sched.next_runs("nope")
