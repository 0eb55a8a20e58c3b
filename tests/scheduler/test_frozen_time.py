"""Schedulers inside frozen time: freezegun and time-machine.

docs/tutorials/testing.md, "With freezegun or time-machine", says what a user may expect.

With ``clock=FrozenTimeClock()`` a scheduler follows the time the test froze:
after ``tick``/``move_to``/``shift``, ``wait_idle()`` alone brings it to the new
instant, within a second of real time, and exactly the slots due there run, with
``scheduled_for`` the frozen instant to the microsecond. The history of a
scenario is compared with the same scenario on a `FakeClock`, the precise tool,
so coalescing, catch-up, skip and cron rules are those of every other clock.
Without that clock, a scheduler inside frozen time runs on the real clock
throughout, says so in a WARNING, and every timeout stays in real seconds.

Every test runs under both tools, from an odd instant (not a round one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final, Protocol

import freezegun
import pytest
import time_machine

from persched import AsyncJobScheduler, JobScheduler, _realtime
from persched.testing import FakeClock, FrozenTimeClock
from tests.support import async_jobs, jobs
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.pressure import CpuPressure, slower_by

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from persched.clock import Clock

TOOLS: Final = ["freezegun", "time-machine"]
START: Final = datetime(2026, 6, 1, 12, 0, 0, 123457, tzinfo=timezone.utc)  # not a round instant
REAL_BOUND: Final = 1.0  # real seconds wait_idle may take after a move (slower on a busy machine: slower_by)
REAL_BOUND_BUSY: Final = 3.0  # ... but never more: a timed wait of a second or more in persched is what it finds


class Mover(Protocol):
    """What a test does to frozen time, whichever tool froze it."""

    def tick(self, seconds: float) -> None: ...

    def move_to(self, when: datetime) -> None: ...


class _TimeMachine:
    def __init__(self, traveller: time_machine.Traveller) -> None:
        self._traveller = traveller

    def tick(self, seconds: float) -> None:
        self._traveller.shift(timedelta(seconds=seconds))

    def move_to(self, when: datetime) -> None:
        self._traveller.move_to(when)


class _Freezegun:
    def __init__(self, frozen: Any) -> None:  # noqa: ANN401 - freezegun's factory types are private
        self._frozen = frozen

    def tick(self, seconds: float) -> None:
        self._frozen.tick(timedelta(seconds=seconds))

    def move_to(self, when: datetime) -> None:
        self._frozen.move_to(when)


@contextlib.contextmanager
def frozen(tool: str, at: datetime = START) -> Iterator[Mover]:
    """Freeze time at `at` with `tool` (time-machine without ticking, as docs/tutorials/testing.md says)."""
    if tool == "freezegun":
        with freezegun.freeze_time(at) as f:
            yield _Freezegun(f)
    else:
        with time_machine.travel(at, tick=False) as traveller:
            yield _TimeMachine(traveller)


class _FakeMover:
    """The same moves on a FakeClock (forward only: a scenario never moves back)."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def tick(self, seconds: float) -> None:
        self._clock.advance(seconds)

    def move_to(self, when: datetime) -> None:
        step = when - datetime.fromtimestamp(self._clock.now_us() / 1e6, timezone.utc)
        self._clock.advance(step.total_seconds())


def settled_in_real_time(sched: JobScheduler) -> float:
    """`wait_idle()` and the real seconds it took."""
    began = _realtime.monotonic()
    assert sched.wait_idle(timeout=TIMEOUT)
    return _realtime.monotonic() - began


# --- following frozen time --------------------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS)
def test_each_tick_of_one_interval_runs_exactly_one_slot(tmp_path: Path, tool: str) -> None:
    pressure = CpuPressure()
    with frozen(tool) as mover, JobScheduler(tmp_path / "jobs.db", clock=FrozenTimeClock()) as sched:
        job = sched.schedule("report", jobs.record, 60.0, args=("report",))
        assert job.next_run_at == START + timedelta(seconds=60)
        try:
            for n in range(1, 4):
                mover.tick(60)
                took = settled_in_real_time(sched)  # no other call in between: wait_idle alone
                assert took < slower_by(REAL_BOUND, pressure, at_most=REAL_BOUND_BUSY), (
                    f"wait_idle took {took:.3f} s of real time (CPU denied: {pressure.share():.0%})"
                )
                assert len(jobs.calls("report")) == n
        finally:
            pressure.stop()
        slots = [c.scheduled_for for c in jobs.calls("report")]
        assert slots == [START + timedelta(seconds=60 * n) for n in (1, 2, 3)]  # to the microsecond
        assert [r.started_at for r in sched.runs("report")] == slots[::-1]
        mover.tick(59.999999)  # a microsecond short of the next slot: nothing
        settled_in_real_time(sched)
        assert len(jobs.calls("report")) == 3


Step = tuple[str, Any]  # ("tick", seconds) or ("move_to", aware datetime)

SCENARIOS: Final[dict[str, tuple[dict[str, Any], datetime, list[Step]]]] = {
    # (schedule() options, where time starts, the moves)
    "coalesce": ({"interval_seconds": 60.0}, START, [("tick", 60), ("tick", 250), ("tick", 10), ("tick", 50)]),
    "skip": (
        {"interval_seconds": 60.0, "misfire": "skip"},
        START,
        [("tick", 60), ("tick", 250), ("tick", 70)],
    ),
    "catch-up": (
        {"interval_seconds": 60.0, "misfire": "catch_up", "max_catch_up": 2},
        START,
        [("tick", 60), ("tick", 300), ("tick", 60)],
    ),
    # Paris 2026-03-29: 02:30 local does not exist; it fires once at 03:00 CEST (01:00 UTC).
    "cron-spring-forward": (
        {"cron": "30 2 * * *", "timezone": "Europe/Paris"},
        datetime(2026, 3, 27, 23, 59, 58, 654321, tzinfo=timezone.utc),
        [
            ("move_to", datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc)),
            ("move_to", datetime(2026, 3, 29, 1, 0, 0, 1, tzinfo=timezone.utc)),
            ("move_to", datetime(2026, 3, 30, 0, 45, tzinfo=timezone.utc)),
        ],
    ),
    # Paris 2026-10-25: 02:30 local happens twice; it fires once, at the first (00:30 UTC).
    "cron-fall-back": (
        {"cron": "30 2 * * *", "timezone": "Europe/Paris"},
        datetime(2026, 10, 24, 23, 0, 0, 987654, tzinfo=timezone.utc),
        [
            ("move_to", datetime(2026, 10, 25, 0, 30, tzinfo=timezone.utc)),
            ("move_to", datetime(2026, 10, 25, 1, 31, tzinfo=timezone.utc)),
            ("move_to", datetime(2026, 10, 26, 1, 30, tzinfo=timezone.utc)),
        ],
    ),
}


def _history(
    path: Path, clock: Clock, mover: Mover, options: dict[str, Any], steps: list[Step]
) -> list[tuple[str, str | None]]:
    """Run `steps`, waiting for idle after each; the history as (scheduled_for, outcome), oldest first."""
    pressure = CpuPressure()
    with JobScheduler(path, clock=clock) as sched:
        opts = dict(options)
        interval = opts.pop("interval_seconds", None)
        sched.schedule("j", jobs.record, interval, args=("j",), **opts)
        for kind, value in steps:
            getattr(mover, kind)(value)
            took = settled_in_real_time(sched)
            assert took < slower_by(REAL_BOUND, pressure, at_most=REAL_BOUND_BUSY), (
                f"{took:.2f} s (CPU denied: {pressure.share():.0%})"
            )
        pressure.stop()
        return [(r.scheduled_for.isoformat(), r.outcome) for r in reversed(sched.runs("j", limit=1000))]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("tool", TOOLS)
def test_the_history_is_the_one_a_fake_clock_gives(tmp_path: Path, tool: str, scenario: str) -> None:
    options, start, steps = SCENARIOS[scenario]
    fake = FakeClock(start=start.timestamp())
    expected = _history(tmp_path / "fake.db", fake, _FakeMover(fake), options, steps)
    jobs.reset()
    with frozen(tool, start) as mover:
        got = _history(tmp_path / "frozen.db", FrozenTimeClock(), mover, options, steps)
    assert got == expected
    assert any(outcome == "ok" for _, outcome in got)  # the scenario ran something


def test_the_scenarios_tell_the_policies_apart(tmp_path: Path) -> None:
    """The comparison above can fail: the scenarios' histories differ from one another."""
    histories = set()
    for name in ("coalesce", "skip", "catch-up"):
        options, start, steps = SCENARIOS[name]
        fake = FakeClock(start=start.timestamp())
        histories.add(tuple(_history(tmp_path / f"{name}.db", fake, _FakeMover(fake), options, steps)))
        jobs.reset()
    assert len(histories) == 3


@pytest.mark.parametrize("tool", TOOLS)
def test_a_restart_under_frozen_time_finds_the_schedule_again(tmp_path: Path, tool: str) -> None:
    db = tmp_path / "jobs.db"
    with frozen(tool) as mover:
        with JobScheduler(db, clock=FrozenTimeClock()) as first:
            first.schedule("report", jobs.record, 60.0, args=("report",))
            mover.tick(60)
            settled_in_real_time(first)
        mover.tick(150)  # down for two slots and a half
        with JobScheduler(db, clock=FrozenTimeClock()) as second:
            assert settled_in_real_time(second) < REAL_BOUND
            job = second.get_job("report")
            assert job is not None
            assert job.next_run_at == START + timedelta(seconds=240)
            mover.tick(30)
            settled_in_real_time(second)
    slots = [c.scheduled_for for c in jobs.calls("report")]
    # The slot of the first run; one run standing for 120 s and 180 s (coalesced); then 240 s.
    assert slots == [START + timedelta(seconds=s) for s in (60, 180, 240)]


@pytest.mark.parametrize("tool", TOOLS)
def test_a_move_back_is_a_step_of_the_wall_clock(tmp_path: Path, tool: str) -> None:
    """No slot runs twice and nothing bursts; time counts on from where the scheduler was."""
    with frozen(tool) as mover, JobScheduler(tmp_path / "jobs.db", clock=FrozenTimeClock()) as sched:
        sched.schedule("report", jobs.record, 60.0, args=("report",))
        mover.tick(60)
        settled_in_real_time(sched)
        mover.move_to(START - timedelta(hours=1))
        settled_in_real_time(sched)
        assert len(jobs.calls("report")) == 1
        mover.tick(60)  # a minute passes: the next slot is due
        settled_in_real_time(sched)
    slots = [c.scheduled_for for c in jobs.calls("report")]
    assert slots == [START + timedelta(seconds=60), START + timedelta(seconds=120)]


@pytest.mark.parametrize("tool", TOOLS)
def test_wait_idle_timeout_is_in_real_seconds(tmp_path: Path, tool: str) -> None:
    with frozen(tool) as mover, JobScheduler(tmp_path / "jobs.db", clock=FrozenTimeClock()) as sched:
        sched.schedule("slow", jobs.block, 60.0, args=("slow",))
        mover.tick(60)
        assert jobs.gate("slow").started.wait(TIMEOUT)
        began = _realtime.monotonic()
        assert sched.wait_idle(timeout=0.3) is False  # the run blocks: not idle
        took = _realtime.monotonic() - began
        assert 0.3 <= took < 0.3 + REAL_BOUND, took
        jobs.gate("slow").release.set()
        assert sched.wait_idle(timeout=TIMEOUT)


@pytest.mark.parametrize("tool", TOOLS)
def test_the_async_front_end_follows_frozen_time(tmp_path: Path, tool: str) -> None:
    async def scenario(mover: Mover) -> list[datetime]:
        async with AsyncJobScheduler(tmp_path / "jobs.db", clock=FrozenTimeClock()) as sched:
            await sched.schedule("pulse", async_jobs.on_loop, 30.0, args=("pulse",))
            for _ in range(2):
                mover.tick(30)
                assert await sched.wait_idle(timeout=TIMEOUT)
            return [r.scheduled_for for r in await sched.runs("pulse")]

    with frozen(tool) as mover:
        slots = asyncio.run(scenario(mover))
    assert slots == [START + timedelta(seconds=60), START + timedelta(seconds=30)]
    assert [c.scheduled_for for c in jobs.calls("pulse")] == slots[::-1]


# --- the default clock inside frozen time -------------------------------------------------------


def _real_now() -> datetime:
    return datetime.fromtimestamp(_realtime.time_ns() / 1e9, timezone.utc)


def _runs_on_the_real_clock(sched: JobScheduler, key: str, since: datetime) -> None:
    wait_until(lambda: len(jobs.calls(key)) >= 3, message=f"3 runs of {key} on the real clock")
    now = _real_now()
    for call in jobs.calls(key)[:3]:
        assert call.scheduled_for is not None
        assert since - timedelta(seconds=1) <= call.scheduled_for <= now, (call.scheduled_for, since, now)


@pytest.mark.parametrize("tool", TOOLS)
def test_the_default_clock_inside_frozen_time_is_the_real_clock(
    tmp_path: Path, tool: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Started inside frozen time: real instants throughout, a WARNING naming FrozenTimeClock, no hang."""
    since = _real_now()
    with (
        caplog.at_level(logging.WARNING, logger="persched"),
        frozen(tool, datetime(2020, 2, 29, 23, 59, 59, 999999, tzinfo=timezone.utc)),
        JobScheduler(tmp_path / "jobs.db") as sched,
    ):
        job = sched.schedule("pulse", jobs.record, 0.05, args=("pulse",), start_in=0)
        assert job.created_at >= since - timedelta(seconds=1)
        _runs_on_the_real_clock(sched, "pulse", since)
        assert sched.wait_idle(timeout=TIMEOUT) in (True, False)  # returns (real seconds), never hangs
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("FrozenTimeClock" in w and tool in w for w in warnings), warnings


@pytest.mark.parametrize("tool", TOOLS)
def test_freezing_time_under_a_running_scheduler_changes_nothing(tmp_path: Path, tool: str) -> None:
    with JobScheduler(tmp_path / "jobs.db") as sched:
        sched.schedule("pulse", jobs.record, 0.05, args=("pulse",), start_in=0)
        wait_until(lambda: len(jobs.calls("pulse")) >= 1, message="a first run")
        jobs.reset()
        since = _real_now()
        with frozen(tool, datetime(2031, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)):
            _runs_on_the_real_clock(sched, "pulse", since - timedelta(seconds=0.1))


def test_a_frozen_time_clock_reads_the_real_clock_outside_frozen_time() -> None:
    clock = FrozenTimeClock()
    before = _realtime.time_ns() // 1000
    assert before <= clock.now_us() <= _realtime.time_ns() // 1000
    with frozen("freezegun"):
        assert clock.now_us() == int((START - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(microseconds=1))
    with pytest.raises(ValueError, match="poll_seconds"):
        FrozenTimeClock(poll_seconds=0)
