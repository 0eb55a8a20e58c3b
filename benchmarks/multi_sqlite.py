"""Several processes on one SQLite file (issue 12, item 7; SPEC-multi "Sharing costs no slots").

N scheduler processes (``--instances 1 3`` by default, each measured on a
fresh file) share one SQLite file in WAL mode and the same load: `--jobs`
jobs (default 50) with intervals spread over 0.1-0.3 s, scheduled before the
processes start so that every process sees the same jobs. The callable is
`benchmarks.targets.noop`. After `--warmup` seconds of slots, the slots
scheduled in the next `--window` seconds are measured; `--settle` seconds
later every process gets SIGTERM (graceful shutdown).

From ``persched_runs`` afterwards:

- ``offered``: Σ floor(window / interval) over the jobs;
- ``ran``: runs whose ``scheduled_for`` lies in the window (a slot coalesced
  into a later run has no run of its own, so it counts as not run);
- ``fraction_of_offered`` = ran / offered;
- ``lateness_ms`` p50/p99/max: ``started_at - scheduled_for`` of those runs
  (``started_at`` is the claim's commit, SPEC §2's start of a run);
- ``twice``: slots run more than once (must be 0);
- ``by_instance``: runs per process.

Prints one JSON line per instance count, and with more than one count
``ratio``: the fraction of N processes over that of one.

    python -m benchmarks.multi_sqlite                     # 1 and 3 processes, 10 s windows
    python -m benchmarks.multi_sqlite --instances 3 --reps 3
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

from benchmarks import _common as c

REPO: Final = Path(__file__).resolve().parents[1]
TARGET: Final = "benchmarks.targets:noop"
INTERVALS: Final = (0.1, 0.15, 0.2, 0.25, 0.3)
START_TIMEOUT: Final = 60.0  # seconds for a process to start its scheduler
STOP_TIMEOUT: Final = 30.0  # seconds for a graceful shutdown


def intervals(jobs: int) -> dict[str, float]:
    """The load: `jobs` jobs, intervals cycling through 0.1-0.3 s."""
    return {f"j{i}": INTERVALS[i % len(INTERVALS)] for i in range(jobs)}


def child(url: str, instance: str, ready: str, workers: int) -> None:
    """One instance: start a scheduler, say so, run until SIGTERM."""
    from persched import JobScheduler

    c.quiet_logging()
    stopping = [False]

    def on_term(signum: int, frame: object) -> None:
        stopping[0] = True

    signal.signal(signal.SIGTERM, on_term)
    sched = JobScheduler(url, workers=workers, instance_id=instance)
    sched.start()
    Path(ready).write_text(instance)
    while not stopping[0]:
        signal.pause()  # woken by SIGTERM; no polling
    sched.shutdown(wait=True, timeout=STOP_TIMEOUT)
    c.finish(0)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(
    instances: int, *, jobs: int, window: float, warmup: float, settle: float, workers: int, directory: str
) -> dict[str, Any]:
    """Run `instances` processes on a fresh file; the numbers of the module docstring."""
    from sqlalchemy import select

    from persched import JobScheduler
    from persched._db import make_engine
    from persched._schema import runs

    db = Path(tempfile.mkdtemp(prefix=f"multi{instances}-", dir=directory)) / "jobs.db"
    url = f"sqlite:///{db}"
    load = intervals(jobs)
    # The processes start first (so start-up costs no slots), then the jobs
    # get their first slots a little later: every process picks them up.
    children: list[subprocess.Popen[bytes]] = []
    setup = JobScheduler(url)
    setup.jobs()  # creates the schema before several processes race to
    setup.shutdown()
    try:
        for i in range(instances):
            ready = db.with_name(f"i{i}.ready")
            cmd = [sys.executable, "-m", "benchmarks.multi_sqlite", "--child", url, f"i{i}", str(ready)]
            cmd += ["--workers", str(workers)]
            children.append(subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}))
        deadline = time.monotonic() + START_TIMEOUT
        for i in range(instances):
            while not db.with_name(f"i{i}.ready").exists():
                if time.monotonic() > deadline or children[i].poll() is not None:
                    raise SystemExit(f"instance {i} did not start")
                time.sleep(0.05)
        sched = JobScheduler(url)
        lead = 2.0  # seconds until the first slots: the running instances pick the jobs up meanwhile
        first = {job_id: sched.schedule(job_id, TARGET, iv, start_in=lead).next_run_at for job_id, iv in load.items()}
        sched.shutdown()
        start = min(first.values()).timestamp() + warmup
        end = start + window
        time.sleep(max(0.0, end + settle - time.time()))
    finally:
        for proc in children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in children:
            _reap(proc)
    engine = make_engine(url)
    with engine.connect() as conn:
        q = select(runs.c.job_id, runs.c.scheduled_for, runs.c.started_at, runs.c.instance_id)
        rows = conn.execute(q.order_by(runs.c.run_id)).all()
    engine.dispose()
    parsed = [(r[0], r[1].timestamp(), r[2].timestamp(), r[3]) for r in rows]
    in_window = [r for r in parsed if start <= r[1] < end]
    slots = Counter((job_id, slot) for job_id, slot, _, _ in in_window)
    late = sorted((started - slot) * 1000 for _, slot, started, _ in in_window)
    offered = sum(math.floor(window / iv) for iv in load.values())
    return {
        "workload": "multi_sqlite",
        "system": "persched",
        "instances": instances,
        "jobs": jobs,
        "window_s": window,
        "offered": offered,
        "ran": len(slots),
        "fraction_of_offered": round(len(slots) / offered, 4),
        "lateness_ms": {
            "p50": c.percentile(late, 50),
            "p99": c.percentile(late, 99),
            "max": late[-1] if late else None,
        },
        "twice": sum(1 for n in slots.values() if n > 1),
        "by_instance": dict(Counter(r[3] for r in in_window)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--child", nargs=3, metavar=("URL", "INSTANCE", "READY"), help=argparse.SUPPRESS)
    p.add_argument("--instances", type=int, nargs="+", default=[1, 3])
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--reps", type=int, default=1, help="repetitions, interleaved over the instance counts")
    p.add_argument("--dir", default=None, help="where the SQLite files go (default: a temp dir)")
    args = p.parse_args()
    if args.child:
        child(*args.child, workers=args.workers)
        return
    directory = args.dir or tempfile.mkdtemp(prefix="persched-multi-")
    for _ in range(args.reps):
        fractions: dict[int, float] = {}
        for n in args.instances:
            record = measure(
                n,
                jobs=args.jobs,
                window=args.window,
                warmup=args.warmup,
                settle=args.settle,
                workers=args.workers,
                directory=directory,
            )
            fractions[n] = record["fraction_of_offered"]
            if len(fractions) > 1 and min(fractions) in fractions:
                record["ratio"] = round(fractions[n] / fractions[min(fractions)], 4)
            c.emit(record)


if __name__ == "__main__":
    main()
