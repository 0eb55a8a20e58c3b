"""Workload 2, lateness: N jobs every 1 s (phases spread evenly over the second).

Offered slots are those whose scheduled time falls in the window, N per
second. A slot "ran" if a run stood for exactly it; everything else is missed
(skipped, coalesced into a later run, or dropped past a misfire grace time).
Lateness is start - scheduled slot over the runs that ran:

- persched: the slot is ``persched.current_run().scheduled_for`` read inside
  the callable, the start is ``time.monotonic()`` mapped into the
  scheduler's own time frame (read when it was made);
- APScheduler: the slot is the job event's ``scheduled_run_time``, the start
  is ``time.time()`` in the callable, paired per job in order (max_instances=1,
  so one job's runs never overlap).

Prints one JSON line: offered, ran, missed, lateness_ms p50/p99/max, and the
raw lateness list when --samples is given (for the runner's chart).

``--busy-core`` keeps one core busy meanwhile (a spinning child process, started
before the scheduler and killed after it): the "other core busy" case.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

from benchmarks import _common as c
from benchmarks import targets

if TYPE_CHECKING:
    import argparse

    from apscheduler.events import JobExecutionEvent


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--window", type=float, default=10.0, help="seconds of slots measured")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--settle", type=float, default=2.0, help="seconds after the window for its last runs")
    p.add_argument("--samples", action="store_true", help="include every lateness (ms) in the JSON line")
    p.add_argument("--busy-core", action="store_true", help="keep one core busy with a spinning process meanwhile")
    args = p.parse_args()
    spinner = None
    if args.busy_core:  # its own output closed: a spinner left behind must not hold a caller's pipe open
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL)
    try:
        _measure(args)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    c.finish()  # after the spinner: it leaves with os._exit


def _measure(args: argparse.Namespace) -> None:
    log = c.quiet_logging()
    path = c.db_path(args.dir)
    interval = 1.0
    base = math.ceil(time.time()) + 1.0
    firsts = {f"j{i}": base + i / args.jobs for i in range(args.jobs)}
    t0 = base + args.warmup
    t1 = t0 + args.window
    record: dict[str, Any] = {"workload": "lateness", "system": args.system, "jobs": args.jobs}
    record["busy_core"] = args.busy_core
    ran: dict[tuple[str, float], float] = {}  # (job, slot epoch) -> lateness seconds

    if args.system == "persched":
        from persched import JobScheduler

        c.persched_create(path)
        c.persched_populate(path, ((j, "benchmarks.targets:late_persched", interval, f) for j, f in firsts.items()))
        scheduler = JobScheduler(path, workers=c.workers(args))
        offset = time.time() - time.monotonic()  # the scheduler's Timebase was read just now
        scheduler.start()
        record["synchronous"] = "FULL/wal"
        time.sleep(max(0.0, t1 + args.settle - time.time()))
        scheduler.shutdown(wait=True, timeout=5)
        for job_id, slot, start in list(targets.LATE_PERSCHED):
            ran[(job_id, round(slot, 6))] = start + offset - slot
    else:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED

        grace = c.aps_grace(args.aps_grace)
        c.aps_populate(path, ((j, "benchmarks.targets:late_aps", interval, f, (j,)) for j, f in firsts.items()), grace)
        aps, engine = c.aps_scheduler(path, c.workers(args), grace)
        events: list[tuple[str, float, int]] = []

        def listener(event: JobExecutionEvent) -> None:
            events.append((event.job_id, event.scheduled_run_time.timestamp(), event.code))

        aps.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        aps.start()
        record["synchronous"] = c.aps_synchronous(engine)
        record["misfire_grace_time"] = args.aps_grace
        time.sleep(max(0.0, t1 + args.settle - time.time()))
        aps.shutdown(wait=False)
        starts: dict[str, deque[float]] = defaultdict(deque)
        for job_id, start in list(targets.LATE_APS):
            starts[job_id].append(start)
        missed_events = 0
        for job_id, slot, code in events:
            if code == EVENT_JOB_MISSED:
                missed_events += 1
            elif starts[job_id]:
                ran[(job_id, round(slot, 6))] = starts[job_id].popleft() - slot
        record["missed_events"] = sum(1 for _, slot, code in events if code == EVENT_JOB_MISSED and t0 <= slot < t1)

    offered = sum(math.ceil(t1 - f - 1e-9) - math.ceil(t0 - f - 1e-9) for f in firsts.values())
    late = sorted(v for (_, slot), v in ran.items() if t0 <= slot < t1)
    record.update(
        window_s=args.window,
        offered=offered,
        ran=len(late),
        missed=offered - len(late),
        lateness_ms_p50=_ms(c.percentile(late, 50)),
        lateness_ms_p99=_ms(c.percentile(late, 99)),
        lateness_ms_max=_ms(late[-1] if late else None),
        **c.log_summary(log),
    )
    if args.samples:
        record["lateness_ms"] = [round(v * 1000, 2) for v in late]
    c.emit(record)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


if __name__ == "__main__":
    main()
