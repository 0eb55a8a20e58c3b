"""Time retention by count (`Store.prune_runs`): the DELETE per job with and without failed runs kept apart.

Fills ``--jobs`` jobs with ``--runs`` finished runs each (every ``--fail-every``-th
one failed), then prunes every job to ``--keep-runs``, alternating two
statements over fresh copies of the same history:

- ``plain``: one DELETE per job that keeps the newest ``keep_runs`` runs
  (retention's statement before ``keep_error_runs``);
- ``failures kept``: `Store.prune_runs` with ``keep_error_runs``, whose DELETE
  also keeps each job's newest failed runs.

Prints the median of each, their ratio and the rows each deleted::

    python -m benchmarks.prune_runs                       # SQLite, 200 jobs x 1,200 runs, 5 rounds
    python -m benchmarks.prune_runs --db postgresql+psycopg://postgres@127.0.0.1:5432/bench

``--db`` must name an empty database (its persched tables are made, filled and
emptied again).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select

from persched._model.instant import Instant, micros
from persched._store import Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store.schema import runs

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy import Connection

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def fill(store: Store, jobs: int, per_job: int, fail_every: int) -> None:
    """`per_job` finished runs for each of `jobs` job ids (runs refer to job ids only: no job rows needed)."""
    with store.engine.begin() as conn:
        conn.execute(runs.delete())
        for j in range(jobs):
            rows = [
                {
                    "job_id": f"job-{j:05d}",
                    "generation": 1,
                    "scheduled_for": T0 + timedelta(seconds=k),
                    "started_at": T0 + timedelta(seconds=k),
                    "finished_at": T0 + timedelta(seconds=k, milliseconds=5),
                    "outcome": "error" if k % fail_every == 0 else "ok",
                    "instance_id": "bench",
                    "run_now": False,
                }
                for k in range(per_job)
            ]
            conn.execute(insert(runs), rows)


def plain(store: Store, job_ids: list[str], keep_runs: int) -> int:
    """Retention's DELETE before failed runs were kept apart, one transaction for every job (as one batch)."""

    def body(conn: Connection) -> int:
        count = 0
        for job_id in job_ids:
            newest_dropped = (
                select(runs.c.run_id)
                .where(runs.c.job_id == job_id)
                .order_by(runs.c.run_id.desc())
                .limit(1)
                .offset(keep_runs)
                .scalar_subquery()
            )
            deleted = conn.execute(
                runs.delete().where(
                    runs.c.job_id == job_id, runs.c.outcome.is_not(None), runs.c.run_id <= newest_dropped
                )
            )
            count += max(deleted.rowcount, 0)
        return count

    return store._write(body, "bench prune")  # the store's own transaction, as prune_runs uses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="an empty database's URL (default: a SQLite file in a temporary directory)")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1200, help="finished runs per job")
    parser.add_argument("--fail-every", type=int, default=10, help="every this many runs one failed")
    parser.add_argument("--keep-runs", type=int, default=1000)
    parser.add_argument("--keep-error-runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'prune.db'}"
        engine = _db.make_engine(url)
        _migrate.upgrade(engine)
        store = Store(engine, _db.mask(engine.url))
        job_ids = [f"job-{j:05d}" for j in range(args.jobs)]
        now = Instant(micros(time.time()))
        variants: dict[str, Callable[[], int]] = {
            "plain": lambda: plain(store, job_ids, args.keep_runs),
            "failures kept": lambda: store.prune_runs(
                now,
                keep_runs=args.keep_runs,
                keep_seconds=None,
                keep_error_runs=args.keep_error_runs,
                job_ids=set(job_ids),
                batch=len(job_ids),  # one transaction, as `plain`
            ),
        }
        seconds: dict[str, list[float]] = {name: [] for name in variants}
        deleted: dict[str, Any] = {}
        for _ in range(args.rounds):
            for name, prune in variants.items():  # interleaved: both see the same load
                fill(store, args.jobs, args.runs, args.fail_every)
                started = time.perf_counter()
                deleted[name] = prune()
                seconds[name].append(time.perf_counter() - started)
        engine.dispose()
    shape = f"{args.jobs} jobs x {args.runs} runs (1 in {args.fail_every} failed)"
    bounds = f"keep_runs {args.keep_runs}, keep_error_runs {args.keep_error_runs}"
    print(f"{engine.dialect.name}: {shape}, {bounds}, {args.rounds} rounds")  # noqa: T201 - a benchmark prints
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, median in medians.items():
        per_job = median / args.jobs * 1e6
        print(f"  {name:14} median {median * 1e3:8.1f} ms  {per_job:7.1f} µs/job  deleted {deleted[name]}")  # noqa: T201
    print(f"  ratio failures kept / plain: {medians['failures kept'] / medians['plain']:.2f}")  # noqa: T201


if __name__ == "__main__":
    main()
