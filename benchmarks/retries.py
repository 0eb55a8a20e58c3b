"""What a retried attempt costs next to a plain run, and a process run next to a thread run, end to end.

A real `JobScheduler` on a `FakeClock` runs `--jobs` jobs; the script
advances the clock one step at a time and waits for the scheduler to be idle
(`wait_idle`), so every step starts exactly `--jobs` runs and the clock never
waits. It measures the steps only (not the set-up) and prints, per run, the
CPU time of this process and the wall time.

- **attempt**: every job fails (``benchmarks.targets:fail``). *plain*: no
  retries, a slot each step. *retried*: ``retries=R``, no backoff, slots
  R + 1 steps apart and each retry due one step after the attempt before, so
  each step is the next attempt of the slot (then the next slot). Both
  variants start one failing run per job and step, and move the clock alike
  (the heartbeat's periodic work too); the difference per run is what an
  attempt adds: writing the pending attempt at the failed run's end, and
  claiming it as an attempt.
- **executor**: every job is a no-op, ``executor="thread"`` against
  ``executor="process"`` (a child per run, started by the forkserver). The
  children's CPU is not this process's: the CPU column counts the parent's
  share only. For the executor alone, without a database:
  ``python -m benchmarks.process_executor``.

Rounds interleave the variants; the table shows medians, and the ratios
compare medians of the same run. With ``--pg URL`` PostgreSQL is measured
too: its ``public`` schema is dropped first, so give it a database of its own.

    python -m benchmarks.retries --jobs 50 --slots 3 --retries 3 --rounds 5
    python -m benchmarks.retries --pg postgresql+psycopg://postgres@127.0.0.1:5432/bench_retries
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from persched.testing import FakeClock

# persched, SQLAlchemy and the shared plumbing are imported in the functions, not here: each process
# run's child imports the parent's main module again (multiprocessing's forkserver and spawn do so),
# and this module is the main module. Imported here, they were most of a process run's cost.

START: Final = 1_800_000_000.123457  # an odd instant
STEP: Final = 3600.0  # seconds the clock moves a step: the same for every variant, so is the periodic work
TIMEOUT: Final = 300.0  # real seconds a step may take


def _steps(clock: FakeClock, steps: int) -> Iterator[None]:
    """Each step: `STEP` seconds on, the next run of every job (its next slot, or its slot's next attempt)."""
    for _ in range(steps):
        clock.advance(STEP)
        yield


def measure(
    url: str,
    namespace: str,
    jobs: int,
    workers: int,
    options: dict[str, Any],
    steps: Callable[[FakeClock], Iterator[None]],
) -> dict[str, float]:
    """Run `jobs` jobs with `options` through `steps`; return the runs and seconds (CPU, wall) per run."""
    from persched import JobScheduler
    from persched.testing import FakeClock

    clock = FakeClock(START)
    sched = JobScheduler(url, namespace=namespace, clock=clock, workers=workers)
    try:
        for i in range(jobs):
            interval = options.get("interval", STEP)
            sched.schedule(f"{namespace}.j{i}", options["target"], interval, start_in=STEP, **options["policy"])
        sched.start()
        assert sched.wait_idle(TIMEOUT)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in steps(clock):
            assert sched.wait_idle(TIMEOUT), "a step did not end"
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        runs = [run for i in range(jobs) for run in sched.runs(f"{namespace}.j{i}", limit=10_000)]
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    return {
        "runs": len(runs),
        "attempts": max(run.attempt for run in runs),
        "cpu": cpu / len(runs),
        "wall": wall / len(runs),
    }


def _fresh_pg(url: str) -> None:
    from sqlalchemy import text

    from persched._store import db as _db

    engine = _db.make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=50, help="jobs, each run once per step (50)")
    p.add_argument("--slots", type=int, default=4, help="slots of the retried variant (4)")
    p.add_argument("--retries", type=int, default=3, help="retries of each slot (3): steps = slots x (retries + 1)")
    p.add_argument("--process-steps", type=int, default=4, help="steps of the executor comparison (4)")
    p.add_argument("--workers", type=int, default=8, help="worker threads (8)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--pg", metavar="URL", help="also PostgreSQL, in a database of its own (its schema is dropped)")
    p.add_argument("--only", choices=("attempt", "executor"), help="one comparison only")
    args = p.parse_args()
    from benchmarks import _common as c

    log = c.quiet_logging()  # every attempt logs its failure: counted, not printed

    engines = {"sqlite": f"sqlite:///{c.db_path(None)}"}
    if args.pg:
        _fresh_pg(args.pg)
        engines["postgresql"] = args.pg
    steps = args.slots * (args.retries + 1)
    failing = {"target": "benchmarks.targets:fail"}
    variants: dict[str, tuple[str, dict[str, Any], Callable[[FakeClock], Iterator[None]]]] = {}
    if args.only in (None, "attempt"):
        variants["plain run"] = ("attempt", {**failing, "policy": {}}, lambda clock: _steps(clock, steps))
        # Slots (retries + 1) steps apart, an attempt one step after the one before: one run a step too.
        retried = {"retries": args.retries, "retry_delay_seconds": STEP, "retry_backoff": 1.0}
        variants["retried attempt"] = (
            "attempt",
            {**failing, "interval": STEP * (args.retries + 1), "policy": retried},
            lambda clock: _steps(clock, steps),
        )
    if args.only in (None, "executor"):
        noop = {"target": "benchmarks.targets:noop"}
        for executor in ("thread", "process"):
            variants[f"{executor} run"] = (
                "executor",
                {**noop, "policy": {"executor": executor}},
                lambda clock: _steps(clock, args.process_steps),
            )

    found: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for engine, url in engines.items():
            for name, (_, options, run_steps) in variants.items():
                namespace = f"{name.replace(' ', '-')}-{round_}"
                record = measure(url, namespace, args.jobs, args.workers, options, run_steps)
                found.setdefault((engine, name), []).append(record)
                print(f"round {round_ + 1}: {engine} {name}: {record}", file=sys.stderr, flush=True)  # noqa: T201

    print(  # noqa: T201 - a benchmark prints
        f"{args.jobs} jobs, {args.workers} workers, {args.rounds} rounds (medians);"
        f" attempt: {steps} steps ({args.slots} slots x {args.retries + 1} attempts);"
        f" executor: {args.process_steps} steps"
    )
    header = f"{'engine':<11} {'variant':<16} {'runs':>5} {'tries':>5} {'CPU µs/run':>11} {'wall µs/run':>12}"
    print(f"{header} {'x plain/thread (CPU / wall)':>28}")  # noqa: T201
    for engine in engines:
        base: dict[str, tuple[float, float]] = {}
        for name, (kind, _, _) in variants.items():
            records = found[(engine, name)]
            cpu = statistics.median(r["cpu"] for r in records) * 1e6
            wall = statistics.median(r["wall"] for r in records) * 1e6
            base.setdefault(kind, (cpu, wall))
            ratio = f"{cpu / base[kind][0]:.2f} / {wall / base[kind][1]:.2f}"
            counts = f"{int(records[0]['runs']):>5} {int(records[0]['attempts']):>5}"  # tries: the highest attempt
            print(f"{engine:<11} {name:<16} {counts} {cpu:>11,.0f} {wall:>12,.0f} {ratio:>28}")  # noqa: T201
    print(f"log records: {c.log_summary(log)}")  # noqa: T201
    c.finish()


if __name__ == "__main__":
    main()
