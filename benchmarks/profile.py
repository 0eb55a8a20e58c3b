"""Profile persched's throughput workload with pyinstrument, every persched thread included.

pyinstrument samples only the thread that started it, and persched's work
happens on its dispatcher, worker and heartbeat threads. So a profiler is
started inside each ``persched-*`` thread (by wrapping ``threading.Thread.run``,
in this benchmark process only), the sessions are combined, and one text
report is printed: wall-clock time per call path summed over the threads
(time blocked in a commit's fsync shows up under the commit). Usage::

    python -m benchmarks.profile --jobs 1000 --window 10
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from benchmarks import _common as c
from benchmarks import targets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--dir", default=None)
    p.add_argument("--show-all", action="store_true", help="do not hide library frames")
    p.add_argument(
        "--synchronous", default="FULL", help="persched's SQLite synchronous (OFF shows the CPU cost without fsync)"
    )
    args = p.parse_args()
    from pyinstrument import Profiler
    from pyinstrument.renderers import ConsoleRenderer
    from pyinstrument.session import Session

    from persched import JobScheduler

    c.quiet_logging()
    sessions: list[Session] = []
    lock = threading.Lock()
    measuring = threading.Event()
    original_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        if not self.name.startswith("persched-"):
            original_run(self)
            return
        measuring.wait()
        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        try:
            original_run(self)
        finally:
            session = profiler.stop()
            with lock:
                sessions.append(session)

    path = c.db_path(args.dir)
    intervals = c.spread_intervals(args.jobs)
    base = time.time() + 1.0
    c.persched_create(path)
    c.persched_populate(
        path, ((f"j{i}", "benchmarks.targets:tick", iv, base + iv * c.phase(i)) for i, iv in enumerate(intervals))
    )
    threading.Thread.run = profiled_run  # type: ignore[method-assign]  # this process only, see the docstring
    scheduler = JobScheduler(path, workers=args.workers, synchronous=args.synchronous)
    # The threads start with the scheduler but wait until the warm-up is over to profile.
    scheduler.start()
    time.sleep(max(0.0, base - time.time()) + args.warmup)
    n0 = len(targets.STARTS)
    measuring.set()
    t0 = time.monotonic()
    time.sleep(args.window)
    scheduler.shutdown(wait=True, timeout=10)
    elapsed = time.monotonic() - t0
    runs = len(targets.STARTS) - n0
    combined: Any = sessions[0]
    for session in sessions[1:]:
        combined = Session.combine(combined, session)
    flat = ConsoleRenderer(unicode=True, color=False, flat=True, flat_time="self", show_all=args.show_all)
    tree = ConsoleRenderer(unicode=True, color=False, time="percent_of_total", show_all=args.show_all)
    title = f"persched throughput, {args.jobs} jobs, synchronous={args.synchronous}: "
    title += f"{runs} runs in {elapsed:.1f} s ({runs / elapsed:.0f}/s)"
    print(f"# {title}; {len(sessions)} threads profiled, wall time summed over threads")  # noqa: T201
    print("## self time, flat\n" + flat.render(combined))  # noqa: T201 - the report
    print("## call tree\n" + tree.render(combined))  # noqa: T201 - the report
    c.finish()


if __name__ == "__main__":
    main()
