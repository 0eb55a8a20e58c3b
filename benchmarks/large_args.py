"""How much jobs with large kwargs slow the others.

Ten small jobs and `--big` jobs whose kwargs are `--big-mb` MB of JSON, all every
0.1 s on the real clock, for `--window` seconds. Prints one JSON line: the runs of
the small jobs, and whether the big jobs were accepted (with the default
``max_args_bytes`` of 64 KiB they are refused; pass ``--max-args-bytes`` to let
them in and see what they cost).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from benchmarks import _common as c


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--big", type=int, default=3)
    p.add_argument("--big-mb", type=float, default=10.0)
    p.add_argument("--window", type=float, default=6.0)
    p.add_argument("--max-args-bytes", type=int, default=None)
    args = p.parse_args()
    c.quiet_logging()
    from persched import JobScheduler
    from persched.errors import InvalidJobError

    options: dict[str, Any] = {} if args.max_args_bytes is None else {"max_args_bytes": args.max_args_bytes}
    path = c.db_path(args.dir)
    scheduler = JobScheduler(path, workers=c.workers(args), **options)
    record: dict[str, Any] = {"workload": "large_args", "big": args.big, "big_mb": args.big_mb, **options}
    blob = "x" * int(args.big_mb * 1_000_000)
    accepted = 0
    for i in range(args.big):
        try:
            scheduler.schedule(f"big{i}", "benchmarks.targets:tick", 0.1, kwargs={"blob": blob}, start_in=0)
            accepted += 1
        except InvalidJobError as exc:  # noqa: PERF203 - three calls
            record["refused"] = str(exc)[:120]
    for i in range(10):
        scheduler.schedule(f"small{i}", "benchmarks.targets:tick", 0.1, start_in=0)
    scheduler.start()
    time.sleep(args.window)  # a benchmark on the real clock: the window is the measurement
    scheduler.shutdown(wait=True)
    record["big_accepted"] = accepted
    with sqlite3.connect(path) as conn:
        (small,) = conn.execute("SELECT count(*) FROM persched_runs WHERE job_id LIKE 'small%'").fetchone()
    record["small_runs"] = small
    c.emit(record)
    c.finish()


if __name__ == "__main__":
    main()
