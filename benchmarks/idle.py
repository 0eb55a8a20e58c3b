"""Workload 3, idle: N jobs whose first slot is an hour away; CPU % of the whole process.

After a warm-up, read the process CPU time over a window; cpu_percent is
100 * CPU seconds / wall seconds (one core = 100). Prints one JSON line.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks import _common as c

HOUR = 3600.0


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--window", type=float, default=20.0, help="measured seconds (the issue: 20)")
    p.add_argument("--warmup", type=float, default=2.0)
    args = p.parse_args()
    log = c.quiet_logging()
    path = c.db_path(args.dir)
    now = time.time()
    rows = [(f"j{i}", HOUR, now + HOUR + 60 * c.phase(i)) for i in range(args.jobs)]
    record: dict[str, Any] = {"workload": "idle", "system": args.system, "jobs": args.jobs}
    if args.system == "persched":
        from persched import JobScheduler

        c.persched_create(path)
        c.persched_populate(path, ((j, "benchmarks.targets:noop", iv, f) for j, iv, f in rows))
        scheduler = JobScheduler(path, workers=c.workers(args))
        scheduler.start()
        record["synchronous"] = "FULL/wal"

        def stop() -> None:
            scheduler.shutdown(wait=True, timeout=5)
    else:
        grace = c.aps_grace(args.aps_grace)
        c.aps_populate(path, ((j, "benchmarks.targets:noop", iv, f, ()) for j, iv, f in rows), grace)
        aps, engine = c.aps_scheduler(path, c.workers(args), grace)
        aps.start()
        record["synchronous"] = c.aps_synchronous(engine)

        def stop() -> None:
            aps.shutdown(wait=False)

    del rows
    time.sleep(args.warmup)
    t0, cpu0 = time.monotonic(), time.process_time()
    time.sleep(args.window)
    t1, cpu1 = time.monotonic(), time.process_time()
    stop()
    record.update(
        window_s=round(t1 - t0, 3),
        cpu_s=round(cpu1 - cpu0, 4),
        cpu_percent=round((cpu1 - cpu0) / (t1 - t0) * 100, 3),
        **c.log_summary(log),
    )
    c.emit(record)
    c.finish()


if __name__ == "__main__":
    main()
