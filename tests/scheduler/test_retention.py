"""Run history: retention by count (failed runs kept apart) and by age, pruned off the dispatch path; bounded
error text."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from typing import TYPE_CHECKING, Any
from unittest.mock import MagicMock, patch

import pytest

from persched import AsyncJobScheduler, JobScheduler
from persched._engine.retention import Retention
from persched._engine.timebase import Timebase
from persched._model.instant import Instant, Micros
from persched._store import MAX_ERROR_TEXT, bound_error_text
from persched.errors import InvalidJobError
from tests.support import cli_jobs, jobs
from tests.support.helpers import TIMEOUT, at, finished_runs, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory


def _scheduler(factory: SchedulerFactory, **options: Any) -> JobScheduler:  # noqa: ANN401 - test options
    sched = JobScheduler(factory.url, workers=2, clock=factory.clock, heartbeat_seconds=1.0, **options)
    factory.created.append(sched)  # shut down at teardown
    sched.start()
    return sched


def _run_times(sched: JobScheduler, clock: FakeClock, count: int, *keys: str) -> None:
    """Advance one interval (1 s) at a time until every job of `keys` ran `count` times in all.

    Each step waits for the run's outcome, so the next slot is never coalesced.
    """
    for n in range(len(jobs.calls(keys[0])) + 1, count + 1):
        if n > 1:
            clock.advance(1.0)
        for key in keys:
            wait_until(
                lambda n=n, key=key: (
                    sum(1 for r in sched.runs(key, limit=1) if r.outcome) == 1  # type: ignore[misc]  # default-bound loop vars
                    and len(jobs.calls(key)) >= n
                ),
                message=f"run {n} of {key}",
            )


def test_keep_runs_keeps_the_newest_per_job(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = _scheduler(make_scheduler, keep_runs=3)
    sched.schedule("a", jobs.record, 1.0, args=("a",), start_in=0)
    _run_times(sched, fake_clock, 8, "a")
    sched.deschedule("a")  # no more runs; its history is still pruned
    sched.schedule("b", jobs.record, 1.0, args=("b",), start_in=0)
    _run_times(sched, fake_clock, 2, "b")
    sched.deschedule("b")

    def pruned() -> bool:
        fake_clock.advance(1.0)  # a heartbeat period: pruning runs on that thread
        return len(sched.runs("a")) <= 3

    wait_until(pruned, message="pruned to 3 runs per job")
    kept = sched.runs("a")
    assert [r.scheduled_for for r in kept] == [at(7), at(6), at(5)]
    assert len(sched.runs("b")) == 2  # under the limit: untouched


def test_keep_error_runs_keeps_the_last_failures_through_a_burst_of_successes(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _scheduler(make_scheduler, keep_runs=3, keep_error_runs=2)
    script = ["error"] * 3 + ["ok"] * 9  # three failures, then a burst of successes
    sched.schedule("a", jobs.follow, 1.0, args=("a", script), start_in=0)
    _run_times(sched, fake_clock, len(script), "a")
    sched.deschedule("a")

    def pruned() -> bool:
        fake_clock.advance(1.0)  # a heartbeat period: pruning runs on that thread
        return len(sched.runs("a")) <= 5

    wait_until(pruned, message="pruned to 3 runs and 2 failures")
    kept = [(r.scheduled_for, r.outcome) for r in sched.runs("a")]
    assert kept == [(at(11), "ok"), (at(10), "ok"), (at(9), "ok"), (at(2), "error"), (at(1), "error")]


def test_keep_runs_for_seconds_prunes_by_age(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = _scheduler(make_scheduler, keep_runs=None, keep_runs_for_seconds=2.5)
    sched.schedule("a", jobs.record, 1.0, args=("a",), start_in=0)
    _run_times(sched, fake_clock, 8, "a")
    sched.deschedule("a")
    finished = {r.scheduled_for: r.finished_at for r in sched.runs("a")}

    def pruned() -> bool:
        fake_clock.advance(0.25)  # a heartbeat (1 s) passes every 4 steps
        now = at(fake_clock.now() - at(0).timestamp())
        kept = {r.scheduled_for for r in sched.runs("a")}
        expired = {slot for slot, done in finished.items() if done is not None and (now - done).total_seconds() > 3.5}
        return bool(expired) and not (kept & expired) and at(7) in kept

    wait_until(pruned, message="runs older than 2.5 s pruned, the newest kept")


def test_no_retention_keeps_everything(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = _scheduler(make_scheduler, keep_runs=None)
    sched.schedule("a", jobs.record, 1.0, args=("a",), start_in=0)
    _run_times(sched, fake_clock, 6, "a")
    wait_until(lambda: len(finished_runs(sched, "a")) == 6, message="all outcomes")
    assert len(sched.runs("a")) == 6


def test_runs_in_flight_are_never_pruned(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = _scheduler(make_scheduler, keep_runs=None)  # no background pruning: the test prunes
    sched.schedule("r", jobs.record, 1.0, args=("r",), start_in=0)
    _run_times(sched, fake_clock, 3, "r")
    sched.schedule("blocked", jobs.block, 1.0, args=("blocked",), start_in=0)
    assert jobs.gate("blocked").started.wait(TIMEOUT)
    store = store_of(sched)  # the pruning contract is the store's
    deleted = store.prune_runs(
        Instant(fake_clock.now_us()), keep_runs=1, keep_seconds=Micros(0), job_ids={"r", "blocked"}
    )
    assert deleted >= 2
    assert len(sched.runs("r")) <= 1
    open_runs = [r for r in sched.runs("blocked") if r.outcome is None]
    assert len(open_runs) == 1
    jobs.release_all()


def test_pruning_does_not_block_dispatch(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = _scheduler(make_scheduler, keep_runs=2)
    pruning = threading.Event()
    release = threading.Event()
    store = store_of(sched)  # seam: a prune that hangs
    real_prune = store.prune_runs

    def slow_prune(*args: Any, **kwargs: Any) -> int:  # noqa: ANN401 - passes through
        assert threading.current_thread().name == "persched-heartbeat"
        pruning.set()
        release.wait(TIMEOUT)
        return real_prune(*args, **kwargs)

    with patch.object(store, "prune_runs", side_effect=slow_prune):
        sched.schedule("a", jobs.record, 1.0, args=("a",), start_in=0)
        wait_until(lambda: len(jobs.calls("a")) >= 1, message="first run")
        fake_clock.advance(1.0)
        assert pruning.wait(TIMEOUT)
        _run_times(sched, fake_clock, 6, "a")  # runs go on while pruning hangs
        release.set()
        sched.deschedule("a")

        def pruned() -> bool:
            fake_clock.advance(1.0)
            return len(sched.runs("a")) <= 2

        wait_until(pruned, message="pruned after release")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("keep_runs", 0),
        ("keep_runs", 1.5),
        ("keep_runs_for_seconds", -1),
        ("keep_error_runs", 0),
        ("keep_error_runs", -1),
        ("keep_error_runs", 1.5),
        ("keep_error_runs", float("nan")),
        ("keep_error_runs", True),
        ("keep_error_runs", "10"),
        ("keep_error_runs", 2**31),
    ],
)
def test_retention_options_are_checked(sqlite_url: str, option: str, value: object) -> None:
    options: dict[str, Any] = {option: value}
    with pytest.raises(InvalidJobError, match=option) as raised:
        JobScheduler(sqlite_url, **options)
    assert raised.value.argument == option


def test_keep_error_runs_is_an_option_of_the_async_scheduler_too(sqlite_url: str) -> None:
    with pytest.raises(InvalidJobError, match="keep_error_runs"):
        AsyncJobScheduler(sqlite_url, keep_error_runs=0)


def test_a_long_traceback_is_bounded_and_keeps_its_last_line(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("deep", cli_jobs.deep_failure, 60.0, args=(300,), start_in=0)
    wait_until(lambda: bool(finished_runs(sched, "deep")), message="deep failure recorded")
    error = finished_runs(sched, "deep")[0].error
    assert error is not None
    assert len(error) <= MAX_ERROR_TEXT
    assert error.startswith("Traceback (most recent call last):")
    assert error.rstrip().endswith("ValueError: deep failure at the bottom")
    assert "characters cut" in error


def test_bound_error_text() -> None:
    assert bound_error_text("short") == "short"
    text = "a" * 100 + "b" * 100
    bounded = bound_error_text(text, 80)
    assert len(bounded) <= 80
    assert bounded.startswith("a")
    assert bounded.endswith("b")


def test_the_run_counts_kept_for_pruning_stay_bounded_as_job_ids_come_and_go(fake_clock: FakeClock) -> None:
    store = MagicMock()
    store.jobs_over_run_limit.return_value = set()
    store.prune_runs.return_value = 0
    retention = Retention(store, Timebase(fake_clock), keep_runs=1000, keep_for=None)
    retention.prune()  # the first (full) pass; from here on each recorded run is looked at
    tracemalloc.start()
    try:
        for wave in range(20):  # 20 x 1,000 jobs, each run once and then gone (descheduled, replaced by new ids)
            for i in range(1000):
                retention.recorded(f"job-{wave}-{i}", 0)  # each job's first run
            retention.prune()
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 256 * 1024  # 20,000 ids once each: about 1.6 MiB while every one is kept


def test_a_job_is_pruned_each_time_its_run_count_reaches_a_tenth_of_keep_runs(fake_clock: FakeClock) -> None:
    store = MagicMock()
    store.jobs_over_run_limit.return_value = set()
    store.prune_runs.return_value = 0
    retention = Retention(store, Timebase(fake_clock), keep_runs=100, keep_for=None)  # a prune every 10 runs
    retention.prune()

    def pruned(runs_before: Iterable[int | None]) -> set[str]:
        for n in runs_before:
            retention.recorded("a", n)
        retention.prune()
        return set(store.prune_runs.call_args.kwargs["job_ids"])

    assert pruned(range(9)) == set()  # runs 1-9
    assert pruned([9]) == {"a"}  # the 10th
    assert pruned(range(10, 19)) == set()
    assert pruned([19, 20]) == {"a"}  # the 20th: once, however many runs a heartbeat saw
    assert pruned([None]) == {"a"}  # a count not known (a hand-edited row): pruned at once
