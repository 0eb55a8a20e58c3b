"""`persched._engine.skew.ClockCheck`: the time frame measured against a reference clock, step by step.

The instance's clock is a `FakeClock` that claims real time (so it is measured), at an odd
instant; the database's clock is a function the test sets. Deterministic: nothing waits.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest

from persched._engine.config import SchedulerConfig
from persched._engine.skew import ClockCheck
from persched._engine.timebase import Timebase
from persched._model.instant import Instant, Micros
from persched.errors import InvalidJobError
from persched.testing import FakeClock, ShiftedClock

START: Final = 1_700_000_000.25
BOUND: Final = Micros(2_000_000)
HOURS_2: Final = 7_200_000_000  # µs


class RealFakeClock(FakeClock):
    """A FakeClock that claims to tell real time: the check measures it."""

    real_time = True


class Reference:
    """The database's clock: `offset` µs from the fake clock's time as it started (a step of the
    fake clock's wall time alone does not move it); a read takes `trip` seconds."""

    def __init__(self, clock: FakeClock, offset: int = 0, trip: float = 0.0) -> None:
        self.clock, self.offset, self.trip = clock, offset, trip
        self.epoch = clock.now_us() - clock.monotonic_us()
        self.reads = 0

    def __call__(self) -> Instant:
        self.reads += 1
        at = Instant(self.clock.monotonic_us() + self.epoch + self.offset)  # at the start of the round trip
        self.clock.advance(self.trip)
        return at


def made(
    clock: FakeClock, reference: Reference, *, follow: bool = True, bound: Micros | None = BOUND
) -> tuple[Timebase, ClockCheck, list[None]]:
    timebase = Timebase(clock)
    retimed: list[None] = []
    check = ClockCheck(
        timebase, reference, bound, follow=follow, instance_id="me", retimed=lambda: retimed.append(None)
    )
    return timebase, check, retimed


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_an_offset_within_the_bound_is_shown_and_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealFakeClock(START)
    timebase, check, _ = made(clock, Reference(clock, offset=-1_500_000))
    check.check()
    assert check.offset_seconds == 1.5  # the host is 1.5 s ahead of the database
    assert timebase.now() == clock.now_us()
    assert warnings(caplog) == []


@pytest.mark.parametrize("offset", [HOURS_2, -HOURS_2])
def test_a_clock_off_beyond_the_bound_keeps_to_the_reference_with_one_warning(
    caplog: pytest.LogCaptureFixture, offset: int
) -> None:
    clock = RealFakeClock(START)
    reference = Reference(clock, offset=-offset)
    timebase, check, retimed = made(clock, reference)
    check.check()
    assert timebase.now() == clock.now_us() - offset  # the database's time, to the microsecond
    assert check.offset_seconds == offset / 1e6
    [warned] = warnings(caplog)
    assert "instance me: its time was 7200.0 s" in warned
    assert ("ahead of" if offset > 0 else "behind") in warned
    assert retimed == []  # the first reading comes before anything is queued
    clock.advance(60)
    check.check()  # the clock is still off, the frame no longer
    assert timebase.now() == clock.now_us() - offset
    assert len(warnings(caplog)) == 1
    assert reference.reads == 2


def test_a_slow_round_trip_is_not_skew(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealFakeClock(START)
    # The database answered at the start of a 5 s round trip: 2.5 s from its middle, within 2 s + 2.5 s.
    timebase, check, _ = made(clock, Reference(clock, trip=5.0))
    before = timebase.now()
    check.check()
    assert timebase.now() == before + 5_000_000
    assert warnings(caplog) == []


def test_a_reference_that_steps_is_followed_and_the_dispatcher_told(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealFakeClock(START)
    reference = Reference(clock)
    timebase, check, retimed = made(clock, reference)
    check.check()
    reference.offset = 3_600_000_000  # the server's clock stepped an hour forward
    check.check()
    assert timebase.now() == clock.now_us() + 3_600_000_000
    assert retimed == [None]
    [warned] = warnings(caplog)
    assert "its time was 3600.0 s behind the database's clock" in warned


def test_without_follow_only_the_first_reading_moves_the_frame(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealFakeClock(START)
    reference = Reference(clock, offset=-HOURS_2)
    timebase, check, retimed = made(clock, reference, follow=False)  # SQLite: the machine's clock
    check.check()
    assert timebase.now() == clock.now_us() - HOURS_2
    reference.offset = 0  # later readings only show the offset
    check.check()
    assert timebase.now() == clock.now_us() - HOURS_2
    assert check.offset_seconds == 0.0
    assert retimed == []
    assert len(warnings(caplog)) == 1


def test_a_host_clock_stepped_while_running_is_shown_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = RealFakeClock(START)
    timebase, check, _ = made(clock, Reference(clock))
    check.check()
    clock.step_wall(3600)  # the host's clock, not the frame (monotonic) nor the database's
    check.check()
    check.check()
    assert timebase.now() == clock.now_us() - 3_600_000_000  # unmoved
    assert check.offset_seconds == 3600.0
    [warned] = warnings(caplog)
    assert "this host's clock is 3600.0 s ahead of the database's clock" in warned


@pytest.mark.parametrize("clock", [FakeClock(START), ShiftedClock(7200, FakeClock(START))])
def test_a_clock_of_the_tests_own_time_is_never_measured(clock: FakeClock) -> None:
    reference = Reference(FakeClock(START))
    timebase = Timebase(clock)
    check = ClockCheck(timebase, reference, BOUND, follow=True, instance_id="me")
    check.check()
    assert (reference.reads, check.offset_seconds, check.measures) == (0, None, False)


def test_no_bound_measures_nothing() -> None:
    clock = RealFakeClock(START)
    reference = Reference(clock, offset=HOURS_2)
    _, check, _ = made(clock, reference, bound=None)
    check.check()
    assert (reference.reads, check.offset_seconds) == (0, None)


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), "2", True, 10**400])
def test_max_clock_skew_seconds_is_checked(value: object) -> None:
    with pytest.raises(InvalidJobError, match="max_clock_skew_seconds"):
        options(value)


def test_max_clock_skew_seconds_none_turns_the_check_off() -> None:
    assert options(None).max_clock_skew is None
    assert options(0.25).max_clock_skew == 250_000


def options(value: object) -> SchedulerConfig:
    return SchedulerConfig.checked(
        "jobs.db",
        1,
        None,
        instance_id=None,
        lease_seconds=30.0,
        heartbeat_seconds=None,
        busy_timeout_seconds=5.0,
        synchronous="FULL",
        keep_runs=1000,
        keep_runs_for_seconds=None,
        allowed_modules=None,
        pickup_seconds=1.0,
        pickup_check_seconds=0.1,
        horizon_seconds=60.0,
        max_args_bytes=65536,
        namespace="default",
        max_clock_skew_seconds=value,
    )
