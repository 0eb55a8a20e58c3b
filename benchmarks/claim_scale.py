"""The dispatch path's cost against the table's size: one dispatch cycle (the completions of the last
batch, then a claim of `--batch` due jobs, in one transaction) at 2,000 and at 100,000 jobs.

No threads, no heap: one process, one store, so the numbers are the SQL's and the
per-row decisions', not the scheduling of threads. The table is filled in SQL from one
job row (every job every 60 s, all due at one instant), then ANALYZEd; each cycle
claims `--batch` jobs drawn at random from the whole table (each once per pass, so
that a pass over 100,000 jobs touches as many distinct rows as a real instance does)
and completes them in the next cycle. Prints one JSON line per size: the median ms
of wall time and of this process's CPU per cycle, and the ratio to the smallest size.
``--lists`` measures on PostgreSQL also the claim with IN lists and CASE chains (the
other engines' form), interleaved with the arrays.

    python -m benchmarks.claim_scale --db postgresql+psycopg://postgres@127.0.0.1:5432/bench
    python -m benchmarks.claim_scale --db mysql+pymysql://root@127.0.0.1:3306/bench --jobs 2000 100000
    python -m benchmarks.claim_scale --db postgresql+psycopg://... --lists --explain --batch 256

``--intervals own`` gives each job an interval of its own (41-59 s, 90,000 distinct values:
the plans of 100,000 such jobs share no cache but their policies' shape), as
``benchmarks.multi_instance --intervals slow`` does; ``same`` (the default), every job 60 s.

``--explain`` (PostgreSQL) prints instead the claim's locking read of `--batch` due rows
under ``EXPLAIN (ANALYZE, BUFFERS)``, rolled back: the median planning and execution
ms of 7, the first buffers line and scan line.

On PostgreSQL the ``public`` schema is dropped first, on MariaDB every table of the
database: give it a database of its own.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from sqlalchemy import MetaData, text

from benchmarks import _common as c
from persched._model.instant import Instant, Micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion, Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store.dialects import dialect_for
from persched._store.schema import jobs

T = 1_800_000_000_000_000  # microseconds: every job's first slot
S = 1_000_000
INTERVAL = 60  # seconds


def _fill(url: str, count: int, *, interval: float = INTERVAL, analyze: bool = True, namespace: str = "bench") -> Store:
    """A fresh store whose namespace holds `count` jobs j0..j{count-1}, all due at T, analyzed
    (unless not `analyze`: a table just filled, before autovacuum gets to it)."""
    engine = _db.make_engine(url)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    else:
        with engine.begin() as conn:
            for view in conn.execute(text("SHOW FULL TABLES WHERE Table_type = 'VIEW'")).scalars():
                conn.execute(text(f"DROP VIEW `{view}`"))
        meta = MetaData()
        meta.reflect(engine)
        meta.drop_all(engine)
    _migrate.upgrade(engine)
    store = Store(engine, "bench", namespace=namespace)
    template = validate_definition("j0", "benchmarks.targets:noop", validate_policies(float(interval)), (), {}, 0.0)
    store.upsert_job(template, Instant(T))
    # owner_bucket is left NULL, as hand-written SQL leaves it: SQL cannot compute its hash.
    others = [column.name for column in jobs.c if column.name not in ("job_id", "owner_bucket")]
    series = (
        "generate_series(1, :n - 1) AS s(n)"
        if engine.dialect.name == "postgresql"
        else "(SELECT seq AS n FROM seq_1_to_1000000 WHERE seq < :n) AS s"
    )
    name = "'j' || s.n" if engine.dialect.name == "postgresql" else "CONCAT('j', s.n)"
    with engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO persched_jobs (job_id, {', '.join(others)})"  # noqa: S608 - ours
                f" SELECT {name}, {', '.join(f't.{n}' for n in others)} FROM persched_jobs t, {series}"
                " WHERE t.job_id = 'j0'"
            ),
            {"n": count},
        )
        if analyze:
            statement = (
                "ANALYZE persched_jobs" if engine.dialect.name == "postgresql" else "ANALYZE TABLE persched_jobs"
            )
            conn.execute(text(statement))
    return store


def explain(store: Store, batch: int, times: int = 7) -> dict[str, Any]:
    """PostgreSQL: the claim's locking read of `batch` due rows under ``EXPLAIN (ANALYZE, BUFFERS)``,
    `times` times, each rolled back; the median planning and execution ms, the buffers, the first plan."""
    from persched._store import claims
    from persched._store.claim_batch import DISPATCH_SELECT
    from persched._store.dialects import Sql

    slot = Instant(T)
    expected = {(f"j{i}", 1): (slot, slot) for i in range(batch)}
    predicate = Sql.join(claims.claim_clauses(expected, store.dialect).values(), " AND ")
    sql = f"SELECT {DISPATCH_SELECT} FROM persched_jobs WHERE {predicate.text} FOR UPDATE SKIP LOCKED"  # noqa: S608
    planning: list[float] = []
    execution: list[float] = []
    lines: list[str] = []
    with store.engine.connect() as conn:
        for _ in range(times):
            lines = [
                row[0]
                for row in conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS) " + store.dialect.driver_sql(sql), predicate.params
                )
            ]
            conn.rollback()
            planning += [float(line.split()[-2]) for line in lines if line.startswith("Planning Time")]
            execution += [float(line.split()[-2]) for line in lines if line.startswith("Execution Time")]
    buffers = next((line.strip() for line in lines if "Buffers" in line), "")
    scan = next((line.strip() for line in lines if "Scan" in line), "")
    return {
        "planning_ms": statistics.median(planning),
        "execution_ms": statistics.median(execution),
        "buffers": buffers,
        "scan": scan[:120],
        "text_chars": len(sql),
    }


def _own_intervals(store: Store) -> None:
    """Give job j<n> the interval 59 - (n mod 90,000) / 5,000 s: 41-59 s, so each job is due again
    within the next pass's 60 s, once, whichever slot its claim took."""
    number = (
        "CAST(SUBSTR(job_id, 2) AS INTEGER)"
        if store.engine.dialect.name == "postgresql"
        else "CAST(SUBSTRING(job_id, 2) AS UNSIGNED)"
    )
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE persched_jobs SET interval_seconds = 59 - MOD({number}, 90000) / 5000.0"))  # noqa: S608


def measure(
    url: str, count: int, batch: int, cycles: int, *, plans: bool = False, own_intervals: bool = False
) -> dict[str, Any]:
    store = _fill(url, count)
    if own_intervals:
        _own_intervals(store)
    if plans:
        found = explain(store, batch)
        store.engine.dispose()
        return found
    rng = random.Random(46)
    ids = [f"j{i}" for i in range(count)]
    order: list[str] = []
    at = 0  # the next job of this pass in `order`
    walls: list[float] = []
    cpus: list[float] = []
    done: list[Completion] = []
    passed = 0
    for _ in range(cycles):
        if len(order) - at < batch:  # a new pass: every job is due one interval later
            if walls or done:
                passed += 1
            order, at = ids[:], 0
            rng.shuffle(order)
        slot = Instant(T + passed * INTERVAL * S)
        now = Instant(slot + S)
        chosen, at = order[at : at + batch], at + batch
        entries = [(job_id, 1, slot, now) for job_id in chosen]
        wall, cpu = time.perf_counter(), time.process_time()
        _, results = store.dispatch(done, entries, now, "bench", Micros(300 * S))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        claims = [r for r in results if isinstance(r, Claim)]
        assert len(claims) == batch, "every entry is due and must win"
        done = [Completion(claim, "ok", None, Instant(now + S // 10)) for claim in claims]
    store.finish_runs(done, "bench")
    store.engine.dispose()
    skip = min(20, cycles // 4)  # connections and prepared statements warm up
    return {
        "wall_ms": round(statistics.median(walls[skip:]) * 1000, 3),
        "cpu_ms": round(statistics.median(cpus[skip:]) * 1000, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True, help="a PostgreSQL or MariaDB URL of a database of its own")
    p.add_argument("--jobs", type=int, nargs="+", default=[2_000, 100_000])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--cycles", type=int, default=300)
    p.add_argument("--reps", type=int, default=1, help="repetitions, interleaved over the sizes (and claims)")
    p.add_argument("--intervals", choices=("same", "own"), default="same", help="60 s each, or 41-59 s of its own")
    p.add_argument("--lists", action="store_true", help="PostgreSQL: also the claim with IN lists and CASE chains")
    p.add_argument("--explain", action="store_true", help="PostgreSQL: the claim's plan, planning and execution ms")
    args = p.parse_args()
    dialect = type(dialect_for(_db.make_engine(args.db)))
    forms = [dialect.binds_arrays, False] if args.lists and dialect.binds_arrays else [dialect.binds_arrays]
    found: dict[tuple[bool, int], list[dict[str, Any]]] = {(f, n): [] for f in forms for n in args.jobs}
    for _ in range(args.reps):
        for n in args.jobs:
            for form in forms:
                dialect.binds_arrays = form
                found[form, n].append(
                    measure(
                        args.db, n, args.batch, args.cycles, plans=args.explain, own_intervals=args.intervals == "own"
                    )
                )
    if args.explain:
        for (form, n), reps in found.items():
            c.emit(
                {
                    "workload": "claim_plan",
                    "claim": "arrays" if form else "lists",
                    "jobs": n,
                    "batch": args.batch,
                    **reps[0],
                }
            )
        return
    for (form, n), reps in found.items():
        wall = statistics.median(r["wall_ms"] for r in reps)
        base = statistics.median(r["wall_ms"] for r in found[form, min(args.jobs)])
        c.emit(
            {
                "workload": "claim_scale",
                "engine": _db.make_engine(args.db).dialect.name,
                "claim": "arrays" if form else "lists",
                "intervals": args.intervals,
                "jobs": n,
                "batch": args.batch,
                "wall_ms_per_cycle": wall,
                "cpu_ms_per_cycle": statistics.median(r["cpu_ms"] for r in reps),
                "spread_wall_ms": sorted(r["wall_ms"] for r in reps),
                "vs_smallest": round(wall / base, 2) if base else None,
            }
        )


if __name__ == "__main__":
    main()
