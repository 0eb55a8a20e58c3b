"""Time `JobScheduler.jobs()` (`Store.list_jobs`) and `persched jobs`'s `Store.list_jobs_as(plain_job)`.

Over a SQLite file.

Schedules ``--jobs`` jobs (a third each interval, cron and one-shot, so every
kind's schedule text is built) into a fresh SQLite file, then calls each
listing ``--runs`` times and prints the median, the fastest and the cost per
job::

    python -m benchmarks.list_jobs                   # 2,000 jobs, 7 runs
    python -m benchmarks.list_jobs --jobs 500 --runs 15

The scheduler is never started: the numbers are the query and the rows, not
the dispatcher.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from persched import JobScheduler
from persched._engine.scheduler import internals_of
from persched._store.mappers import plain_job

if TYPE_CHECKING:
    from collections.abc import Callable

TARGET = "benchmarks.targets:noop"


def populate(sched: JobScheduler, n: int) -> None:
    """`n` jobs: interval, cron and one-shot in turn."""
    later = datetime.now(timezone.utc) + timedelta(days=30)
    for i in range(n):
        if i % 3 == 0:
            sched.schedule(f"job-{i:05d}", TARGET, 60.0 + i % 50, args=(i,), jitter_seconds=1.0)
        elif i % 3 == 1:
            sched.schedule(f"job-{i:05d}", TARGET, cron=f"{i % 60} * * * *", timezone="Europe/Berlin")
        else:
            sched.schedule(f"job-{i:05d}", TARGET, run_at=later + timedelta(seconds=i), kwargs={"n": i})


def timed(call: Callable[[], list[object]], runs: int, n: int) -> str:
    call()  # warm: imports, the first connection
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = call()
        seconds.append(time.perf_counter() - started)
        assert len(rows) == n, len(rows)
    median = statistics.median(seconds)
    return f"median {median * 1e3:7.1f} ms  min {min(seconds) * 1e3:7.1f} ms  {median / n * 1e6:6.1f} µs/job"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "jobs.db")
        with JobScheduler(path, allowed_modules=["benchmarks"]) as sched:
            populate(sched, args.jobs)
            store = internals_of(sched).store  # the read commands' path (persched jobs)
            print(f"{args.jobs} jobs, SQLite file, {args.runs} runs each")  # noqa: T201 - a benchmark prints its numbers
            print(f"  JobScheduler.jobs()            {timed(sched.jobs, args.runs, args.jobs)}")  # noqa: T201
            listing = timed(lambda: store.list_jobs_as(plain_job), args.runs, args.jobs)
            print(f"  Store.list_jobs_as(plain_job)  {listing}")  # noqa: T201


if __name__ == "__main__":
    main()
