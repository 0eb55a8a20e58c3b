"""The history checker (tests/support/history.py): it rejects bad histories, and real ones pass it.

The first half feeds the checker hand-made histories that each break one
rule, so that a checker that cannot fail would show up here. The second half
records thousands of random schedule / replace / deschedule calls from many
threads against a real-clock scheduler (times: real ``time.monotonic()``;
claims converted from the store's wall instants with the scheduler's
timebase offset) and checks the history.
"""

from __future__ import annotations

import functools
import random
import time
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from tests.proof._settings import scale
from tests.support import proof_jobs
from tests.support.helpers import TIMEOUT, sqlite_path
from tests.support.history import (
    History,
    Op,
    OpLog,
    RunRow,
    Start,
    assert_consistent,
    check,
    drive,
    runs_from_db,
    wait_until_live,
)

if TYPE_CHECKING:
    import threading
    from pathlib import Path

# --- the checker rejects bad histories ---------------------------------------------


def _run(
    run_id: int, gen: int, slot: float, claimed: float, finished: float | None, outcome: str | None = "ok"
) -> RunRow:
    return RunRow(run_id, "j", gen, slot, claimed, finished, outcome)


def _start(run_id: int, gen: int, slot: float, start: float, end: float | None) -> Start:
    return Start(run_id, "j", gen, slot, start, end)


GOOD_OPS = [Op("schedule", "j", 0.0, 1.0, 1), Op("deschedule", "j", 10.0, 11.0, True)]
GOOD_RUNS = [_run(1, 1, 100.0, 2.0, 3.0), _run(2, 1, 101.0, 10.5, 12.0)]
GOOD_STARTS = [_start(1, 1, 100.0, 2.1, 2.9), _start(2, 1, 101.0, 11.5, 11.9)]


def test_a_good_history_passes() -> None:
    # Run 2 was claimed before the deschedule returned and starts its callable just after: allowed.
    assert check(GOOD_OPS, GOOD_RUNS, GOOD_STARTS, end=20.0, live_after=1.0) == []


@pytest.mark.parametrize(
    ("rule", "ops", "runs", "starts"),
    [
        pytest.param(
            "R1",
            GOOD_OPS,
            [*GOOD_RUNS, _run(3, 1, 102.0, 12.0, 12.5)],
            [*GOOD_STARTS, _start(3, 1, 102.0, 12.1, 12.2)],
            id="claim-after-deschedule-returned",
        ),
        pytest.param(
            "R1",
            [Op("schedule", "j", 0.0, 1.0, 1), Op("schedule", "j", 5.0, 6.0, 2)],
            [_run(1, 1, 100.0, 6.5, 7.0)],
            [_start(1, 1, 100.0, 6.6, 6.9)],
            id="old-generation-claimed-after-replacement",
        ),
        pytest.param(
            "R1",
            GOOD_OPS,
            [_run(1, 1, 100.0, 10.1, 10.2), _run(2, 1, 101.0, 10.3, 10.4)],
            [_start(1, 1, 100.0, 11.1, 11.2), _start(2, 1, 101.0, 11.3, 11.4)],
            id="two-late-starts",
        ),
        pytest.param(
            "R2",
            GOOD_OPS,
            [_run(1, 1, 100.0, 2.0, 4.0), _run(2, 1, 101.0, 3.0, 5.0)],
            [_start(1, 1, 100.0, 2.1, 3.9), _start(2, 1, 101.0, 3.1, 4.9)],
            id="overlap",
        ),
        pytest.param(
            "R2",
            GOOD_OPS,
            [_run(1, 1, 100.0, 2.0, None, None), _run(2, 1, 101.0, 3.0, 5.0)],
            [_start(2, 1, 101.0, 3.1, 4.9)],
            id="claimed-while-open",
        ),
        pytest.param(
            "R3",
            GOOD_OPS,
            [_run(1, 1, 100.0, 2.0, 3.0), _run(2, 1, 100.0, 4.0, 5.0)],
            [_start(1, 1, 100.0, 2.1, 2.9), _start(2, 1, 100.0, 4.1, 4.9)],
            id="slot-twice",
        ),
        pytest.param(
            "R4",
            [Op("schedule", "j", 0.0, 1.0, 1)],
            [],
            [],
            id="stayed-scheduled-never-ran",
        ),
        pytest.param(
            "R4",
            [Op("schedule", "j", 0.0, 1.0, 1), Op("schedule", "j", 5.0, 6.0, 2)],
            [_run(1, 1, 100.0, 2.0, 3.0)],
            [_start(1, 1, 100.0, 2.1, 2.9)],
            id="replacement-never-ran",
        ),
        pytest.param(
            "R5",
            GOOD_OPS,
            GOOD_RUNS,
            [*GOOD_STARTS, _start(9, 1, 105.0, 5.0, 5.1)],
            id="start-without-claim",
        ),
        pytest.param("R5", GOOD_OPS, GOOD_RUNS, GOOD_STARTS[:1], id="ok-without-start"),
        pytest.param(
            "R5",
            GOOD_OPS,
            [*GOOD_RUNS, _run(3, 1, 103.0, 9.0, None, None)],
            GOOD_STARTS,
            id="left-open",
        ),
        pytest.param(
            "R5",
            GOOD_OPS,
            GOOD_RUNS,
            [_start(1, 1, 100.0, 1.0, 2.9), GOOD_STARTS[1]],
            id="callable-before-claim",
        ),
        pytest.param(
            "R5",
            GOOD_OPS,
            [_run(1, 1, 100.0, 2.0, 3.0, "maybe")],
            [GOOD_STARTS[0]],
            id="bad-outcome",
        ),
    ],
)
def test_the_checker_rejects(rule: str, ops: list[Op], runs: list[RunRow], starts: list[Start]) -> None:
    problems = check(ops, runs, starts, end=20.0, live_after=1.0)
    assert problems, "the checker accepted a bad history"
    assert any(p.startswith(rule) for p in problems), problems


def test_a_concurrent_final_schedule_is_not_held_to_liveness() -> None:
    # The deschedule overlapped the schedule: which one won is unknown, so R4 must not judge.
    ops = [Op("schedule", "j", 0.0, 2.0, 1), Op("deschedule", "j", 1.0, 1.5, True)]
    assert check(ops, [], [], end=20.0, live_after=1.0) == []


def _killed_after_a_replacement_committed(log: OpLog) -> float:
    """A process replaced "a" (g3), then replaced it again (g4, committed) and was killed before
    logging that return: the history must hold the second call as in flight, result unknown."""
    first = log.invoked("schedule", "a", 0.05)
    log.returned("schedule", "a", first, 3, 0.05)
    log.invoked("schedule", "a", 0.06)  # committed g4, then the kill
    return time.monotonic()


def _one_run_of_g4(killed_at: float) -> tuple[list[RunRow], list[Start]]:
    """The restart's run of "a" g4, stored and as its callable saw it."""
    return [RunRow(1, "a", 4, 100.0, killed_at + 1, killed_at + 1.1, "ok")], [
        Start(1, "a", 4, 100.0, killed_at + 1.01, killed_at + 1.09)
    ]


def test_a_call_cut_short_by_a_kill_is_in_flight_with_an_unknown_result(tmp_path: Path) -> None:
    log = OpLog(tmp_path / "ops.jsonl")
    killed_at = _killed_after_a_replacement_committed(log)
    ops = log.read(cut_at=killed_at)
    assert [(o.kind, o.result) for o in ops] == [("schedule", 3), ("schedule", None)]
    assert ops[1].returned == killed_at
    # The restart ran only g4, which no logged call returned: g3 is not held to liveness.
    runs, starts = _one_run_of_g4(killed_at)
    assert check(ops, runs, starts, end=killed_at + 2, live_after=0.0, timed=False) == []


def test_without_the_in_flight_call_the_same_history_breaks_liveness(tmp_path: Path) -> None:
    # What the checker said of such a kill when only returns were logged: R4 of a g3 that never ran.
    log = OpLog(tmp_path / "ops.jsonl")
    killed_at = _killed_after_a_replacement_committed(log)
    returned_only = [o for o in log.read(cut_at=killed_at) if o.result is not None]
    runs, starts = _one_run_of_g4(killed_at)
    problems = check(returned_only, runs, starts, end=killed_at + 2, live_after=0.0, timed=False)
    assert [p.split(" stayed")[0] for p in problems] == ["R4 a g3"]


def test_a_failed_check_shows_the_history_it_judged() -> None:
    runs = [*GOOD_RUNS, _run(3, 1, 101.0, 12.0, 12.5)]
    starts = [*GOOD_STARTS, _start(3, 1, 101.0, 12.1, 12.2)]
    with pytest.raises(AssertionError) as failure:
        assert_consistent(GOOD_OPS, runs, starts, end=20.0, live_after=1.0)
    text = str(failure.value)
    assert any(line.startswith("R3 slot ('j', 1, 101.0) claimed twice") for line in text.splitlines())
    for item in [*GOOD_OPS, *runs, *starts]:
        assert repr(item) in text, f"{item} is not shown"


# --- real histories from many threads ----------------------------------------------

JOB_IDS = [f"job-{i}" for i in range(12)]
INTERVALS = [0.01, 0.02, 0.03, 0.05]


def _driver(sched: JobScheduler, history: History, key: str, seed: int, n: int, barrier: threading.Barrier) -> None:
    rnd = random.Random(seed)
    barrier.wait(TIMEOUT)
    for _ in range(n):
        time.sleep(rnd.uniform(0, 0.01))  # pacing, so that generations live long enough to run
        job_id = rnd.choice(JOB_IDS)
        roll = rnd.random()
        if roll < 0.6:
            interval = rnd.choice(INTERVALS)
            work = rnd.choice([0.0, 0.0, 0.002])
            start_in = rnd.choice([0, None])
            history.schedule(
                functools.partial(
                    sched.schedule, job_id, proof_jobs.tracked, interval, args=(key, work), start_in=start_in
                ),
                job_id,
                interval,
            )
        else:
            history.deschedule(functools.partial(sched.deschedule, job_id), job_id)


def test_random_operations_from_many_threads_satisfy_the_checker(tmp_path: Path, seed: int) -> None:
    threads_n, per_thread = scale(8, 16), scale(250, 2000)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    history = History()
    key = f"hist-{seed}"
    proof_jobs.register(key, history)
    sched = JobScheduler(url, workers=4, lease_seconds=30.0, synchronous="NORMAL")
    try:
        sched.start()
        drive(threads_n, lambda i, barrier: _driver(sched, history, key, seed + i, per_thread, barrier), TIMEOUT * 12)
        ops, _ = history.snapshot()
        assert len(ops) == threads_n * per_thread
        offset = sched._timebase._offset
        path = sqlite_path(url)

        wait_until_live(history, lambda: runs_from_db(path, offset), TIMEOUT)
        end = time.monotonic()
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
        proof_jobs.unregister(key)
    ops, starts = history.snapshot()
    runs = runs_from_db(path, offset)
    assert_consistent(ops, runs, starts, end=end, live_after=0.0)
    generations_run = len({(r.job_id, r.generation) for r in runs})
    print(f"operations={len(ops)} runs={len(runs)} starts={len(starts)} generations_run={generations_run}")  # noqa: T201
    # Non-vacuous: the history has replacements, deschedules that removed something, and runs.
    assert sum(1 for op in ops if op.kind == "deschedule" and op.result) > 10
    assert generations_run > 50
