"""Workload 1, throughput: N jobs, intervals spread over 0.1-1 s, a trivial callable.

After a warm-up, count the runs that started in a window and the CPU the whole
process used meanwhile. Prints one JSON line:
runs_per_s, cpu_s_per_1000_runs, offered (sum of floor(window/interval)),
fraction_of_offered, cpu_us_per_run, kib_written_per_run (``/proc/self/io``: SQLite's WAL
and checkpoints), plus the logger's WARNING/ERROR counts.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from benchmarks import _common as c
from benchmarks import targets


def scheduler_engine_name(url: str) -> str:
    """The engine a ``--db`` URL names, for the record."""
    from persched._store.db import to_url

    return to_url(url).get_backend_name()


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--window", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds after the first slots before measuring")
    p.add_argument("--db", default=None, help="persched only: a server URL (PostgreSQL, MySQL, MariaDB); emptied first")
    args = p.parse_args()
    log = c.quiet_logging()
    path = c.db_path(args.dir)
    intervals = c.spread_intervals(args.jobs)
    base = time.time() + 1.0  # first slots start one second after set-up
    rows = [(f"j{i}", iv, base + iv * c.phase(i)) for i, iv in enumerate(intervals)]
    record: dict[str, Any] = {"workload": "throughput", "system": args.system, "jobs": args.jobs}

    if args.system == "persched":
        from persched import JobScheduler

        where = path if args.db is None else args.db
        c.persched_create(where)
        populate = c.persched_populate if args.db is None else c.persched_populate_url
        populate(where, ((j, "benchmarks.targets:tick", iv, first) for j, iv, first in rows))
        scheduler = JobScheduler(where, workers=c.workers(args))
        scheduler.start()
        record["synchronous"] = "FULL/wal" if args.db is None else scheduler_engine_name(where)

        def stop() -> None:
            scheduler.shutdown(wait=True, timeout=5)
    else:
        grace = c.aps_grace(args.aps_grace)
        c.aps_populate(path, ((j, "benchmarks.targets:tick", iv, first, ()) for j, iv, first in rows), grace)
        aps, engine = c.aps_scheduler(path, c.workers(args), grace)
        aps.start()
        record["synchronous"] = c.aps_synchronous(engine)
        record["misfire_grace_time"] = args.aps_grace

        def stop() -> None:
            aps.shutdown(wait=False)

    # Warm-up counts from the first slot, so that slow set-up does not eat into it.
    time.sleep(max(0.0, base - time.time()) + args.warmup)
    t0, cpu0, wrote0 = time.monotonic(), time.process_time(), c.written_bytes()
    time.sleep(args.window)
    t1, cpu1, wrote1 = time.monotonic(), time.process_time(), c.written_bytes()
    stop()
    starts = sorted(targets.STARTS)
    runs = bisect_left(starts, t1) - bisect_left(starts, t0)
    offered = c.offered_slots(intervals, t1 - t0)
    record.update(
        window_s=round(t1 - t0, 3),
        runs=runs,
        runs_per_s=round(runs / (t1 - t0), 1),
        cpu_s_per_1000_runs=round((cpu1 - cpu0) / runs * 1000, 4) if runs else None,
        cpu_percent=round((cpu1 - cpu0) / (t1 - t0) * 100, 1),
        cpu_us_per_run=round((cpu1 - cpu0) / runs * 1e6, 1) if runs else None,
        kib_written_per_run=round((wrote1 - wrote0) / runs / 1024, 2) if runs and wrote0 and wrote1 else None,
        offered=offered,
        offered_per_s=round(offered / (t1 - t0), 1),
        fraction_of_offered=round(runs / offered, 4) if offered else None,
        **c.log_summary(log),
    )
    c.emit(record)
    c.finish()


if __name__ == "__main__":
    main()
