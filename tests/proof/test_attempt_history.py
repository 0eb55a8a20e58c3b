"""The history checker knows attempts (tests/support/history.py, rules R3 and R6).

A slot may have several runs: attempt 1, and with ``retries`` an attempt k+1
after attempt k ended in failure (docs/reference/behaviour.md, "Retries").
The first half feeds the checker hand-made histories that each break one
rule of attempts, so that a checker that cannot fail would show up here;
the second records a real history from many threads against a real-clock
scheduler whose jobs fail on purpose and are retried, with run-now requests,
replacements and deschedules mixed in, on every engine, and checks it.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from persched.errors import JobNotFoundError
from tests.multi._cluster import throttled
from tests.proof._settings import scale
from tests.support import proof_jobs
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.history import (
    History,
    Op,
    RunRow,
    RunsReader,
    Start,
    assert_consistent,
    check,
    drive,
    runs_from_url,
    wait_until_live,
)
from tests.support.pressure import CpuPressure, slower_by

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

pytestmark = pytest.mark.every_engine

# --- the checker rejects bad histories of attempts --------------------------------------------


def _run(
    run_id: int,
    attempt: int,
    claimed: float,
    finished: float | None,
    outcome: str | None,
    *,
    slot: float = 100.0,
    run_now: bool = False,
) -> RunRow:
    return RunRow(run_id, "j", 1, slot, claimed, finished, outcome, "me", attempt, run_now)


def _start(run_id: int, attempt: int, start: float, end: float | None, *, slot: float = 100.0) -> Start:
    return Start(run_id, "j", 1, slot, start, end, attempt)


OPS = [Op("schedule", "j", 0.0, 1.0, 1)]
# Attempt 1 fails, attempt 2 is lost, attempt 3 succeeds; a run-now run in between; the next slot runs.
GOOD_RUNS = [
    _run(1, 1, 2.0, 3.0, "error"),
    _run(2, 1, 3.5, 3.6, "error", slot=3.5, run_now=True),
    _run(3, 2, 4.0, 5.0, "lost"),
    _run(4, 3, 6.0, 7.0, "ok"),
    _run(5, 1, 8.0, 9.0, "ok", slot=160.0),
]
GOOD_STARTS = [
    _start(1, 1, 2.1, 2.9),
    _start(2, 1, 3.51, 3.59, slot=3.5),
    _start(3, 2, 4.1, 4.2),
    _start(4, 3, 6.1, 6.9),
    _start(5, 1, 8.1, 8.9, slot=160.0),
]


def test_a_good_history_of_attempts_passes() -> None:
    assert check(OPS, GOOD_RUNS, GOOD_STARTS, end=20.0, live_after=1.0) == []
    assert check(OPS, GOOD_RUNS, GOOD_STARTS, end=20.0, live_after=1.0, timed=False) == []


def _replaced(items: list[RunRow] | list[Start], index: int, item: RunRow | Start) -> list[RunRow] | list[Start]:
    return [*items[:index], item, *items[index + 1 :]]


@pytest.mark.parametrize(
    ("rule", "runs", "starts"),
    [
        pytest.param(
            "R3",
            [*GOOD_RUNS, _run(6, 2, 5.5, 5.8, "error")],
            [*GOOD_STARTS, _start(6, 2, 5.6, 5.7)],
            id="an-attempt-twice",
        ),
        pytest.param(
            "R6",
            [GOOD_RUNS[0], _run(3, 3, 4.0, 5.0, "ok")],
            [GOOD_STARTS[0], _start(3, 3, 4.1, 4.9)],
            id="an-attempt-skipped",
        ),
        pytest.param(
            "R6",
            [_run(3, 2, 4.0, 5.0, "ok")],
            [_start(3, 2, 4.1, 4.9)],
            id="attempt-2-without-attempt-1",
        ),
        pytest.param(
            "R6",
            _replaced(GOOD_RUNS, 0, _run(1, 1, 2.0, 3.0, "ok")),
            GOOD_STARTS,
            id="retry-after-a-success",
        ),
        pytest.param(
            "R6",
            _replaced(GOOD_RUNS, 2, _run(3, 2, 4.0, 5.0, "stopped")),
            GOOD_STARTS,
            id="retry-after-a-stop",
        ),
        pytest.param(
            "R6",
            _replaced(GOOD_RUNS, 2, _run(3, 2, 4.0, 6.5, "lost")),
            _replaced(GOOD_STARTS, 3, _start(4, 3, 6.6, 6.9)),
            id="claimed-before-the-last-attempt-ended",
        ),
        pytest.param(
            "R6",
            [_run(1, 1, 2.0, None, None), _run(3, 2, 4.0, 5.0, "ok")],
            [GOOD_STARTS[0], _start(3, 2, 4.1, 4.9)],
            id="claimed-while-the-last-attempt-is-open",
        ),
        pytest.param(
            "R6",
            _replaced(GOOD_RUNS, 1, _run(2, 2, 3.5, 3.6, "error", slot=3.5, run_now=True)),
            GOOD_STARTS,
            id="a-run-now-run-numbered-as-a-retry",
        ),
        pytest.param(
            "R6",
            GOOD_RUNS,
            _replaced(GOOD_STARTS, 2, _start(3, 2, 2.5, 4.2)),
            id="a-callable-before-the-last-attempts-ended",
        ),
        pytest.param(
            "R5",
            GOOD_RUNS,
            _replaced(GOOD_STARTS, 3, _start(4, 2, 6.1, 6.9)),
            id="the-callable-saw-another-attempt",
        ),
    ],
)
def test_the_checker_rejects_a_bad_history_of_attempts(rule: str, runs: list[RunRow], starts: list[Start]) -> None:
    problems = check(OPS, runs, starts, end=20.0, live_after=1.0)
    assert problems, "the checker accepted a bad history"
    assert any(p.startswith(rule) for p in problems), problems


def test_an_attempt_claimed_before_the_last_ended_is_rejected_across_processes_too() -> None:
    # Without a common time frame (timed=False), the run ids still order the attempts: attempt 2 got the
    # lower id, so it was inserted before attempt 1 was.
    runs = [RunRow(1, "j", 1, 100.0, 0.0, 0.5, "ok", "b", 2), RunRow(2, "j", 1, 100.0, 2.0, 3.0, "error", "a", 1)]
    problems = check(OPS, runs, [], end=20.0, timed=False)
    assert any(p.startswith("R6") for p in problems), problems


# --- a real history with retries, from many threads ----------------------------------------------

JOB_IDS = [f"job-{i}" for i in range(8)]
INTERVALS = [0.15, 0.25, 0.4]
STEADY_INTERVAL = 2.0  # seconds: room for three attempts of a slot on a busy machine


def _schedule_call(
    sched: JobScheduler, rnd: random.Random, key: str, job_id: str
) -> tuple[Callable[[], object], float]:
    """A schedule() of a job that fails its first 0..3 attempts of each slot, with 1..3 retries 10-30 ms
    apart; and its interval."""
    interval = rnd.choice(INTERVALS)
    call = functools.partial(
        sched.schedule,
        job_id,
        proof_jobs.failing_tracked,
        interval,
        args=(key, rnd.choice([0, 1, 1, 2, 3]), rnd.choice([0.0, 0.002])),
        retries=rnd.choice([1, 2, 3]),
        retry_delay_seconds=rnd.choice([0.01, 0.02]),
        retry_backoff=rnd.choice([1.0, 1.5]),
        retry_lost=rnd.choice([False, True]),
        start_in=rnd.choice([0, None]),
    )
    return call, interval


def _driver(sched: JobScheduler, history: History, key: str, seed: int, n: int, barrier: threading.Barrier) -> None:
    rnd = random.Random(seed)
    barrier.wait(TIMEOUT)
    for _ in range(n):
        time.sleep(rnd.uniform(0.0, 0.06))  # pacing, so that slots live long enough to be retried
        job_id = rnd.choice(JOB_IDS)
        roll = rnd.random()
        if roll < 0.45:
            call, interval = _schedule_call(sched, rnd, key, job_id)
            history.schedule(call, job_id, interval)
        elif roll < 0.8:
            with contextlib.suppress(JobNotFoundError):  # a job not scheduled (yet, or any more)
                sched.run_now(job_id)
        else:
            history.deschedule(functools.partial(sched.deschedule, job_id), job_id)


def test_random_operations_on_retrying_jobs_satisfy_the_checker(db_url: str, seed: int) -> None:
    threads_n, per_thread = scale(4, 8), scale(60, 400)
    history = History()
    key = f"attempts-{seed}"
    proof_jobs.register(key, history)
    sched = JobScheduler(db_url, workers=4, lease_seconds=30.0, pickup_seconds=0.2)
    pressure = CpuPressure()
    try:
        sched.start()
        # One job the drivers leave alone: its slots fail twice, then succeed (the non-vacuity checks below).
        # Its three attempts must end within one interval (an attempt is never made into the next slot:
        # docs/reference/behaviour.md, Retries); at 0.3 s, on 2 cores at load 15, every slot gave up.
        steady = functools.partial(
            sched.schedule,
            "steady",
            proof_jobs.failing_tracked,
            STEADY_INTERVAL,
            args=(key, 2),
            retries=3,
            retry_delay_seconds=0.01,
            start_in=0,
        )
        history.schedule(steady, "steady", STEADY_INTERVAL)
        drive(threads_n, lambda i, barrier: _driver(sched, history, key, seed + i, per_thread, barrier), TIMEOUT * 6)
        offset = sched._timebase._offset
        sched.run_now("steady")  # its run-now run fails (attempt 1) and is not retried
        # The waits below are for runs on the real clock: on a machine that denies the scheduler a share
        # of the CPU they come that much later. Both read the database on one connection (and the first
        # at most every 0.1 s), so that the polling takes little of the CPU the scheduler needs.
        patience = slower_by(TIMEOUT, pressure, at_most=3 * TIMEOUT)
        reader = RunsReader(db_url, offset)

        def steady_done() -> bool:
            runs = reader.runs()
            steady_runs = [r for r in runs if r.job_id == "steady"]
            return (
                any(r.attempt == 3 and r.outcome == "ok" for r in steady_runs)
                and any(r.run_now and r.outcome == "error" for r in steady_runs)
                and sum(r.attempt > 1 for r in runs) > 5  # the non-vacuity check below: enough retries
            )

        try:
            try:
                wait_until(
                    throttled(steady_done),
                    timeout=patience,
                    message="the steady slot ran its third attempt, its run-now run failed, 6 runs were retries",
                )
            except AssertionError as exc:
                runs = reader.runs()
                steady_runs = "\n".join(map(str, (r for r in runs if r.job_id == "steady")))
                retries = sum(r.attempt > 1 for r in runs)
                raise AssertionError(f"{exc}; {retries} retries; the steady job's runs:\n{steady_runs}") from None
            wait_until_live(history, reader.runs, patience)
        finally:
            reader.close()
        end = time.monotonic()
    finally:
        pressure.stop()
        sched.shutdown(wait=True, timeout=TIMEOUT)
        proof_jobs.unregister(key)
    ops, starts = history.snapshot()
    runs = runs_from_url(db_url, offset)
    assert_consistent(ops, runs, starts, end=end, live_after=0.0)
    retried = [r for r in runs if r.attempt > 1]
    print(  # noqa: T201 - the report's counts
        f"operations={len(ops)} runs={len(runs)} retries={len(retried)} run_now={sum(r.run_now for r in runs)} "
        f"deepest={max((r.attempt for r in runs), default=0)}"
    )
    # Non-vacuous: slots were retried (some more than once), run-now runs ran, and some failed run-now
    # runs were not retried.
    assert len(retried) > 5
    assert any(r.attempt >= 3 for r in runs)
    assert any(r.run_now and r.outcome == "error" for r in runs)
