"""Where a slot's lateness goes: the timeline of each run from its slot to its start, in phases.

Runs the lateness workload (N jobs every 1 s, phases spread over the second,
SQLite) in this process and stamps, on the monotonic clock, each run's way:

- ``wake``: slot -> the dispatcher's cycle that claims it begins (its wake-up, and any cycle
  still running before it);
- ``claim``: -> that cycle's commit begins (BEGIN IMMEDIATE, the completions' and the claim's
  statements, the decisions);
- ``commit``: the commit (the WAL's fsync, and a checkpoint when one is due);
- ``hand``: commit -> the run handed to its worker (the hand-over of the batch before it);
- ``start``: hand-over -> the callable starts on its worker (the thread's wake-up and the GIL).

Prints, for the runs whose slot is in the window, p50 / p99 of each phase and
of the whole, and the mean of each phase over the runs at or above the p99 of
the whole (where the tail goes). ``--busy-core`` spins a process on the
other core meanwhile. No JSON: a report to read::

    python -m benchmarks.slot_timeline --jobs 1000
    python -m benchmarks.slot_timeline --jobs 1000 --busy-core
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks import _common as c
from benchmarks import targets

PHASES = ("wake", "claim", "commit", "hand", "start")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--busy-core", action="store_true", help="keep one core busy with a spinning process meanwhile")
    args = p.parse_args()
    spinner = None
    if args.busy_core:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL)
    try:
        _measure(args)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    c.finish()


def _measure(args: argparse.Namespace) -> None:
    from persched import JobScheduler
    from persched._engine import handover as _handover
    from persched._engine import runs as _runs
    from persched._engine.scheduler import internals_of

    c.quiet_logging()
    cycles: dict[int, float] = {}  # a cycle's number -> when it began
    commits: list[tuple[float, float]] = []  # (start, end) of each dispatcher commit
    handed: dict[tuple[str, float], tuple[float, int]] = {}  # (job, slot epoch) -> (handed at, its cycle)
    current: list[int] = [0]
    real_cycle = _runs.RunBook.cycle

    def cycle(self: Any, completions: Any, due: Any, hand_over: Any) -> Any:  # noqa: ANN401
        current[0] += 1
        cycles[current[0]] = time.monotonic()
        return real_cycle(self, completions, due, hand_over)

    real_hand_over = _handover.Handover.hand_over

    def hand_over(self: Any, claim: Any) -> None:  # noqa: ANN401
        handed[(claim.job_id, round(claim.scheduled_for / 1e6, 6))] = (time.monotonic(), current[0])
        real_hand_over(self, claim)

    _runs.RunBook.cycle = cycle  # type: ignore[method-assign]  # this process only
    _handover.Handover.hand_over = hand_over  # type: ignore[method-assign]  # this process only
    path = c.db_path(None)
    base = math.ceil(time.time()) + 1.0
    firsts = {f"j{i}": base + i / args.jobs for i in range(args.jobs)}
    c.persched_create(path)
    c.persched_populate(path, ((j, "benchmarks.targets:late_persched", 1.0, f) for j, f in firsts.items()))
    scheduler = JobScheduler(path, workers=args.workers)
    engine = internals_of(scheduler).store.engine
    real_commit = engine.dialect.do_commit

    def timed_commit(dbapi_connection: Any) -> None:  # noqa: ANN401 - the DB-API connection
        started = time.monotonic()
        real_commit(dbapi_connection)
        if threading.current_thread().name == "persched-dispatcher":
            commits.append((started, time.monotonic()))

    engine.dialect.do_commit = timed_commit  # type: ignore[method-assign]  # this process only
    offset = time.time() - time.monotonic()
    scheduler.start()
    t0 = base + args.warmup
    t1 = t0 + args.window
    time.sleep(max(0.0, t1 + 2.0 - time.time()))
    scheduler.shutdown(wait=True, timeout=5)

    cycle_commit: dict[float, tuple[float, float]] = {}  # cycle start -> its commit (the first after it began)
    ends = sorted(commits)
    starts = sorted(cycles.values())
    k = 0
    for began in starts:
        while k < len(ends) and ends[k][0] < began:
            k += 1
        if k < len(ends):
            cycle_commit[began] = ends[k]
    phases: dict[str, list[float]] = {name: [] for name in (*PHASES, "total")}
    rows: list[tuple[float, ...]] = []
    for job_id, slot, start in list(targets.LATE_PERSCHED):
        if not t0 <= slot < t1:
            continue
        key = (job_id, round(slot, 6))
        if key not in handed:
            continue
        at, cycle_id = handed[key]
        began = cycles.get(cycle_id)
        if began is None or began not in cycle_commit:
            continue
        commit_start, commit_end = cycle_commit[began]
        due = slot - offset  # the slot on the monotonic clock
        row = (began - due, commit_start - began, commit_end - commit_start, at - commit_end, start - at, start - due)
        rows.append(row)
        for name, value in zip((*PHASES, "total"), row, strict=True):
            phases[name].append(value * 1000)
    print(  # noqa: T201 - the report
        f"# {args.jobs} jobs at 1 s, {args.workers} workers{', other core busy' if args.busy_core else ''}: "
        f"{len(rows)} runs in the window"
    )
    print("phase     p50 ms   p99 ms   mean ms over the runs at or above the p99 of the total")  # noqa: T201
    total_p99 = c.percentile(sorted(phases["total"]), 99) or 0.0
    tail = [r for r in rows if r[-1] * 1000 >= total_p99]
    for i, name in enumerate((*PHASES, "total")):
        values = sorted(phases[name])
        p50, p99 = c.percentile(values, 50) or 0.0, c.percentile(values, 99) or 0.0
        mean_tail = sum(r[i] for r in tail) / len(tail) * 1000 if tail else 0.0
        print(f"{name:8s} {p50:7.2f} {p99:8.2f} {mean_tail:9.2f}")  # noqa: T201


if __name__ == "__main__":
    main()
