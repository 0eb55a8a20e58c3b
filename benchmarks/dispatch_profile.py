"""Where a run's time goes on the dispatch path: each driver call and the commit, µs per run.

Runs the throughput workload (N jobs at 0.1-1 s, SQLite) in this process and
times, over the window, every statement the dispatch path sends on the
driver's cursor (`persched._store.dialects.DriverCursor`) and every commit,
on the thread that makes it (wall time: a commit's fsync counts, and so does
a call's wait for the GIL). Also the CPU each kind of thread used
(``/proc/self/task``), the bytes the process wrote (``/proc/self/io``:
SQLite's WAL and checkpoints) per run, and ``--cprofile``: a cProfile of the
dispatcher thread (slower, and every function's time inflated by it; its
ratios are what it is for). Prints a small report; no JSON::

    python -m benchmarks.dispatch_profile --jobs 10000
    python -m benchmarks.dispatch_profile --jobs 10000 --cprofile
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import threading
import time
from typing import Any

from benchmarks import _common as c
from benchmarks import targets


def _thread_cpu() -> collections.Counter[str]:
    """CPU seconds each kind of thread used so far (workers together), from ``/proc/self/task``."""
    tick = os.sysconf("SC_CLK_TCK")
    used: collections.Counter[str] = collections.Counter()
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        kind = "persched-worker-*" if thread.name.startswith("persched-worker-") else thread.name
        used[kind] += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return used


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=8.0, help="seconds first: every job claimed once (its plan read)")
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--cprofile", action="store_true", help="also profile the dispatcher thread")
    args = p.parse_args()
    from persched import JobScheduler
    from persched._engine.scheduler import internals_of
    from persched._store import dialects

    c.quiet_logging()
    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    measuring = threading.Event()
    real_run = dialects.DriverCursor._run

    def timed_run(self: Any, sql: str, params: Any, *, many: bool) -> None:  # noqa: ANN401
        started = time.perf_counter()
        try:
            real_run(self, sql, params, many=many)
        finally:
            if measuring.is_set():
                what = sql.split(" WHERE")[0][:60] + (" [executemany]" if many else "")
                spent[what] += time.perf_counter() - started
                calls[what] += 1

    dialects.DriverCursor._run = timed_run  # type: ignore[method-assign]  # this process only
    profiles: list[cProfile.Profile] = []
    real_thread_run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        if self.name != "persched-dispatcher" or not args.cprofile:
            real_thread_run(self)
            return
        profile = cProfile.Profile()  # from the thread's start: the warm-up's share is the window's
        profiles.append(profile)
        profile.enable()
        try:
            real_thread_run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]  # this process only
    path = c.db_path(None)
    intervals = c.spread_intervals(args.jobs)
    base = time.time() + 1.0
    c.persched_create(path)
    c.persched_populate(
        path, ((f"j{i}", "benchmarks.targets:tick", iv, base + iv * c.phase(i)) for i, iv in enumerate(intervals))
    )
    scheduler = JobScheduler(path, workers=args.workers)
    engine = internals_of(scheduler).store.engine
    real_commit = engine.dialect.do_commit

    def timed_commit(dbapi_connection: Any) -> None:  # noqa: ANN401 - the DB-API connection
        started = time.perf_counter()
        real_commit(dbapi_connection)
        if measuring.is_set():
            spent["COMMIT"] += time.perf_counter() - started
            calls["COMMIT"] += 1

    engine.dialect.do_commit = timed_commit  # type: ignore[method-assign]  # this process only
    scheduler.start()
    time.sleep(max(0.0, base - time.time()) + args.warmup)
    written, runs_before = c.written_bytes(), len(targets.STARTS)
    cpu, t0, by_thread = time.process_time(), time.monotonic(), _thread_cpu()
    measuring.set()
    time.sleep(args.window)
    measuring.clear()
    elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu
    by_thread = _thread_cpu() - by_thread
    runs = len(targets.STARTS) - runs_before
    after = c.written_bytes()
    scheduler.shutdown(wait=True, timeout=10)
    commits = max(1, calls["COMMIT"])
    print(  # noqa: T201 - the report
        f"# {args.jobs} jobs, {args.workers} workers: {runs / elapsed:.0f} runs/s, {runs / commits:.1f} runs a commit, "
        f"process CPU {cpu / runs * 1e6:.0f} µs a run"
        + ("" if written is None or after is None else f", {(after - written) / runs / 1024:.1f} KiB written a run")
    )
    print("CPU µs a run by thread: " + ", ".join(f"{k} {v / runs * 1e6:.0f}" for k, v in by_thread.most_common()))  # noqa: T201
    print("µs a run   calls   µs a call   driver call")  # noqa: T201
    for what, seconds in spent.most_common():
        print(f"{seconds / runs * 1e6:8.1f} {calls[what]:7d} {seconds / calls[what] * 1e6:11.1f}   {what}")  # noqa: T201
    if profiles:
        stats = pstats.Stats(profiles[-1])  # the scheduler measured (persched_create started one before)
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]  # pstats writes its report there
        stats.sort_stats("tottime").print_stats(30)
        print(f"## cProfile of the dispatcher thread ({runs} runs; divide by them for µs a run)\n{out.getvalue()}")  # noqa: T201
    c.finish()


if __name__ == "__main__":
    main()
