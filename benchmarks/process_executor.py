"""What a run costs on a thread and with ``executor="process"``: the executor alone, no database.

Each round runs `--runs` runs of a no-op target on each executor, thread and
process rounds interleaved, and the script prints the median per-run cost of
each (µs for a thread run, ms for a process run) and their ratio. The thread
run is the worker's own path (resolve the target, decode the JSON arguments,
call it with its RunContext set); the process run adds starting a child
(forkserver), importing the target there and reading its report.

    python -m benchmarks.process_executor --runs 200 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from persched._engine.context import ActiveRun, StopSignal
from persched._engine.processes import START_METHOD, ProcessRun, run_in_process
from persched._engine.workers import _execute
from persched._model.instant import Instant
from persched._model.policy import RunPolicy
from persched._store.records import Claim

TARGET = "benchmarks.process_executor:noop"


def noop() -> None:
    """The job: nothing, so that only the executor is measured."""


def _claim(run_id: int) -> Claim:
    at = Instant(1_700_000_123_456_789)
    return Claim("bench", 1, TARGET, "[]", "{}", at, at, run_id)


def thread_round(runs: int) -> float:
    """Seconds per run on the worker's path."""
    loop: list[object] = []
    pid = os.getpid()  # the worker ends a forked child; this is no child
    began = time.perf_counter()
    for i in range(runs):
        ended = _execute(ActiveRun(_claim(i), "default"), None, loop, pid, lambda claim, awaitable: False)  # type: ignore[arg-type]
        assert ended == ("ok", None), ended
    return (time.perf_counter() - began) / runs


def process_round(runs: int) -> float:
    """Seconds per run in a child process."""
    policy = RunPolicy("process", "warn", RunPolicy().stop_grace)
    began = time.perf_counter()
    for i in range(runs):
        ended = run_in_process(ProcessRun(_claim(i), "default", None, policy), StopSignal())
        assert ended == ("ok", None), ended
    return (time.perf_counter() - began) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per round and executor (100)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    args = parser.parse_args()
    process_round(2)  # start the forkserver once, outside the measurement
    threads, processes = [], []
    for _ in range(args.rounds):
        threads.append(thread_round(args.runs * 10))
        processes.append(process_round(args.runs))
    thread_us, process_ms = statistics.median(threads) * 1e6, statistics.median(processes) * 1e3
    print(f"start method: {START_METHOD}; {args.rounds} rounds, medians")  # noqa: T201 - a benchmark prints
    print(f"thread run:  {thread_us:9.1f} µs")  # noqa: T201
    print(f"process run: {process_ms:9.2f} ms  ({process_ms * 1e3 / thread_us:,.0f}x a thread run)")  # noqa: T201


if __name__ == "__main__":
    main()
