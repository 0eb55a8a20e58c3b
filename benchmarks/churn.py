"""Workload 5, churn: schedule + deschedule from several threads on a running scheduler.

Each thread schedules a fresh job id (interval one hour, so nothing runs) and
deschedules it again, until the window ends. ops_per_s counts both calls;
errors counts calls that raised. Prints one JSON line.
"""

from __future__ import annotations

import resource
import threading
import time
from typing import TYPE_CHECKING, Any

from benchmarks import _common as c

if TYPE_CHECKING:
    from collections.abc import Callable

HOUR = 3600.0


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--profile", action="store_true", help="pyinstrument report of the churn threads on stderr")
    p.add_argument("--show-all", action="store_true", help="with --profile: do not hide library frames")
    p.add_argument(
        "--wal-cycled",
        action="store_true",
        help="persched: write one checkpoint cycle of WAL before the window, so that its commits "
        "overwrite the WAL file instead of growing it (a process's steady state)",
    )
    args = p.parse_args()
    log = c.quiet_logging()
    path = c.db_path(args.dir)
    record: dict[str, Any] = {"workload": "churn", "system": args.system, "jobs": 0, "threads": args.threads}
    add: Callable[[str], object]
    remove: Callable[[str], object]
    if args.system == "persched":
        from persched import JobScheduler

        c.persched_create(path)
        scheduler = JobScheduler(path, workers=c.workers(args))
        scheduler.start()
        record["synchronous"] = "FULL/wal"
        if args.wal_cycled:
            record["wal_cycled"] = _cycle_wal(path)

        def add(job_id: str) -> object:
            return scheduler.schedule(job_id, "benchmarks.targets:noop", HOUR)

        def remove(job_id: str) -> object:
            return scheduler.deschedule(job_id)

        def stop() -> None:
            scheduler.shutdown(wait=True, timeout=5)
    else:
        grace = c.aps_grace(args.aps_grace)
        aps, engine = c.aps_scheduler(path, c.workers(args), grace)
        aps.start()
        record["synchronous"] = c.aps_synchronous(engine)

        def add(job_id: str) -> object:
            return aps.add_job("benchmarks.targets:noop", "interval", seconds=HOUR, id=job_id)

        def remove(job_id: str) -> object:
            aps.remove_job(job_id)
            return None

        def stop() -> None:
            aps.shutdown(wait=False)

    ops = [0] * args.threads
    errors = [0] * args.threads
    first_error: list[str] = []
    barrier = threading.Barrier(args.threads + 1)
    deadline = [0.0]

    def attempt(t: int, call: Callable[[str], object], job_id: str) -> None:
        try:
            call(job_id)
            ops[t] += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported, the churn goes on
            errors[t] += 1
            if not first_error:
                first_error.append(f"{type(exc).__name__}: {exc}"[:200])

    sessions: list[Any] = []

    def churn(t: int) -> None:
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001, async_mode="disabled")
        barrier.wait()
        if profiler is not None:
            profiler.start()
        i = 0
        while time.monotonic() < deadline[0]:
            job_id = f"c{t}-{i}"
            i += 1
            for call in (add, remove):
                attempt(t, call, job_id)
        if profiler is not None:
            sessions.append(profiler.stop())

    threads = [threading.Thread(target=churn, args=(t,), daemon=True) for t in range(args.threads)]
    for thread in threads:
        thread.start()
    t0, cpu0, usage0 = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    deadline[0] = t0 + args.window
    barrier.wait()
    for thread in threads:
        thread.join(args.window + 30)
    t1, cpu1, usage1 = time.monotonic(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    stop()
    record.update(
        window_s=round(t1 - t0, 3),
        ops=sum(ops),
        ops_per_s=round(sum(ops) / (t1 - t0), 1),
        cpu_s_per_1000_ops=round((cpu1 - cpu0) / sum(ops) * 1000, 4) if sum(ops) else None,
        # Threads giving the CPU up to wait (a commit's fsync, a lock, the GIL): each costs cold caches.
        waits_per_op=round((usage1.ru_nvcsw - usage0.ru_nvcsw) / sum(ops), 2) if sum(ops) else None,
        errors=sum(errors),
        first_error=first_error[0] if first_error else None,
        stuck_threads=sum(t.is_alive() for t in threads),
        **c.log_summary(log),
    )
    c.emit(record)
    if sessions:
        _report(sessions, args.show_all, f"churn, {args.system}, {args.threads} threads: {record['ops_per_s']} ops/s")
    c.finish()


def _cycle_wal(path: str) -> int:
    """Grow the WAL of `path` past one checkpoint cycle (rows written to a scratch table, then dropped)
    while the scheduler has it open, so that later commits overwrite the WAL file; its size in MiB."""
    import os
    import sqlite3

    from persched._store.dialects.sqlite import CHECKPOINT_BYTES

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE churn_scratch (b BLOB)")
        for _ in range(CHECKPOINT_BYTES // (8 << 20) + 1):  # 8 MiB a transaction
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO churn_scratch VALUES (?)", ((os.urandom(900),) for _ in range(8192)))
            conn.execute("COMMIT")
        conn.execute("DROP TABLE churn_scratch")
    finally:
        conn.close()
    return os.path.getsize(f"{path}-wal") >> 20


def _report(sessions: list[Any], show_all: bool, title: str) -> None:
    """Print the combined pyinstrument report of the churn threads on stderr."""
    import sys

    from pyinstrument.renderers import ConsoleRenderer
    from pyinstrument.session import Session

    combined = sessions[0]
    for session in sessions[1:]:
        combined = Session.combine(combined, session)
    flat = ConsoleRenderer(unicode=True, color=False, flat=True, flat_time="self", show_all=show_all)
    tree = ConsoleRenderer(unicode=True, color=False, time="percent_of_total", show_all=show_all)
    out = sys.stderr
    out.write(f"# {title} (profiled); {len(sessions)} threads, wall time summed over threads\n")
    out.write("## self time, flat\n" + flat.render(combined))
    out.write("## call tree\n" + tree.render(combined))


if __name__ == "__main__":
    main()
