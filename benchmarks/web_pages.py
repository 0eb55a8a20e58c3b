"""The dashboard's pages and the metrics' job count at `--jobs` jobs and `--runs` runs.

Builds a SQLite file with persched's own migrations, fills it with raw
inserts (98 % of runs "ok", the rest error / missed / lost, spread over the
jobs), then times each page of `persched web` called in-process (the WSGI
app, no sockets) and `job_counts` (the metrics' ``persched_jobs``). Prints
one JSON line per measurement: milliseconds of the first call (cold
caches of the app) and the median of `--reps`.

    python -m benchmarks.web_pages --jobs 100000 --runs 1000000
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from contextlib import closing
from pathlib import Path

from persched._interfaces.dashboard.app import WebApp
from persched._interfaces.existing import open_existing
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store import views as _views

T0 = 1_800_000_000


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1e6):06d}"


def build(path: Path, jobs: int, runs: int) -> None:
    engine = _db.make_engine(f"sqlite:///{path}")
    _migrate.upgrade(engine)
    engine.dispose()
    rng = random.Random(18)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        conn.executemany(
            "INSERT INTO persched_jobs (job_id, target, args, kwargs, interval_seconds, first_run_at, next_run_at,"
            " generation, state, created_at, updated_at, run_count, last_outcome)"
            " VALUES (?, 'myapp.tasks:work', '[]', '{}', 60.0, ?, ?, 1, 'scheduled', ?, ?, ?, 'ok')",
            (
                (f"job-{i:06d}", _stamp(T0), _stamp(T0 + 60 * (runs // jobs + 1)), _stamp(T0), _stamp(T0), runs // jobs)
                for i in range(jobs)
            ),
        )
        outcomes = ["ok"] * 980 + ["error"] * 15 + ["missed"] * 4 + ["lost"]

        def rows() -> object:
            for k in range(runs):
                job, slot = k % jobs, k // jobs
                at = T0 + 60 * slot + rng.random()
                outcome = rng.choice(outcomes)
                yield (
                    f"job-{job:06d}",
                    _stamp(T0 + 60 * slot),
                    _stamp(at),
                    _stamp(at + rng.random()),
                    outcome,
                    "Traceback ...\nRuntimeError: boom" if outcome == "error" else None,
                )

        conn.executemany(
            "INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, finished_at, outcome, error,"
            " instance_id, overran, run_now) VALUES (?, 1, ?, ?, ?, ?, ?, 'bench', 0, 0)",
            rows(),  # type: ignore[arg-type]  # a generator of tuples
        )
        conn.commit()


def timed(call: object, reps: int) -> tuple[float, float]:
    """(first call, median of `reps` calls) in milliseconds: the first one fills the caches."""
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        call()  # type: ignore[operator]  # a zero-argument callable
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples[0], statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--without-outcome-index", action="store_true", help="drop ix_persched_runs_outcome (revision 0004): the before"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "web.db"
        start = time.perf_counter()
        build(path, args.jobs, args.runs)
        if args.without_outcome_index:
            with closing(sqlite3.connect(path)) as conn:
                conn.execute("DROP INDEX ix_persched_runs_outcome")
        print(json.dumps({"built": {"jobs": args.jobs, "runs": args.runs, "s": round(time.perf_counter() - start, 1)}}))  # noqa: T201
        store = open_existing(f"sqlite:///{path}")
        app = WebApp(store, None)
        middle = f"job-{args.jobs // 2:06d}"
        pages = {
            "jobs first page": "/",
            "jobs middle page": f"/?after={middle}",
            "job page (chart + history)": f"/job?id={middle}",
            "runs, all": "/runs",
            "runs, error": "/runs?outcome=error",
            "runs, lost": "/runs?outcome=lost",
            "runs, missed, older page": "/runs?outcome=missed&before=500000",
            "runs, running": "/runs?outcome=running",
            "runs, ok": "/runs?outcome=ok",
        }
        try:
            for name, target in pages.items():
                path_info, _, query = target.partition("?")
                environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path_info, "QUERY_STRING": query}
                statuses: list[str] = []

                def get(environ: dict[str, str] = environ, statuses: list[str] = statuses) -> None:
                    b"".join(app(environ, lambda status, headers, exc_info=None: statuses.append(status)))  # type: ignore[arg-type]  # a test double

                first, median = timed(get, args.reps)
                assert set(statuses) == {"200 OK"}, (name, statuses)
                print(json.dumps({"page": name, "first_ms": round(first, 1), "median_ms": round(median, 1)}))  # noqa: T201
            first, median = timed(lambda: _views.job_counts(store), args.reps)
            print(json.dumps({"query": "job_counts (metrics, uncached)", "median_ms": round(median, 1)}))  # noqa: T201
        finally:
            store.engine.dispose()


if __name__ == "__main__":
    main()
