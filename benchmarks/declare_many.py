"""Time ``declare()`` of many specs, and of the same set again unchanged, on any engine.

For each ``--jobs`` size, on a fresh database (a new SQLite file, or a
throwaway PostgreSQL schema or MariaDB database on the server of ``--db``,
dropped afterwards), it prints one JSON line::

    {"workload": "declare_many", "engine": "postgresql", "jobs": 100000,
     "declare_s": ..., "redeclare_s": ..., "redeclare_rows_written": 0, ...}

- ``declare_s``: ``declare(specs, prune=True)`` of N new specs (one transaction).
- ``redeclare_s``: the same specs declared again, unchanged.
- ``*_cpu_s``: this process's CPU time of the same call (the database server's is not in it);
  on a busy machine it moves less than the wall time.
- ``*_rows_written``: rows of ``persched_jobs`` whose ``updated_at`` moved, and
  change-counter values spent (``change_seq``), read before and after each
  declaration: an unchanged declaration writes none.
- ``replace_s`` (with ``--replace``): every spec's interval changed, declared.

The scheduler is never started: the numbers are the checks, the database's
work and the returned jobs, not the dispatcher::

    python -m benchmarks.declare_many --jobs 10000 50000 100000
    python -m benchmarks.declare_many --db postgresql+psycopg://postgres@127.0.0.1:5432/test --jobs 100000
    python -m benchmarks.declare_many --db mysql+pymysql://root@127.0.0.1:3306/test --jobs 100000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from persched import JobScheduler, JobSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

TARGET = "benchmarks.targets:noop"


@contextlib.contextmanager
def fresh_database(db: str, directory: str) -> Iterator[str]:
    """A URL of an empty database: a new SQLite file, or a throwaway schema (PostgreSQL) or database (MariaDB)."""
    if db == "sqlite":
        yield f"sqlite:///{Path(directory) / f'declare-{uuid.uuid4().hex[:8]}.db'}"
        return
    base = make_url(db)
    name = f"persched_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, poolclass=NullPool)
    postgres = base.get_backend_name() == "postgresql"
    create, drop = (
        (f'CREATE SCHEMA "{name}"', f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        if postgres
        else (f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4", f"DROP DATABASE IF EXISTS `{name}`")
    )
    with admin.begin() as conn:
        conn.execute(text(create))
    try:
        url = base.update_query_dict({"options": f"-csearch_path={name}"}) if postgres else base.set(database=name)
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(drop))
        admin.dispose()


def specs(n: int, interval: float) -> list[JobSpec]:
    return [JobSpec(f"job-{i:06d}", TARGET, interval + i % 60, args=(i,)) for i in range(n)]


def _written(url: str, since: str) -> tuple[int, int]:
    """Rows whose updated_at is after `since`, and the change counter's value."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT COUNT(*) FROM persched_jobs WHERE updated_at > :t"), {"t": since})
            seq = conn.execute(text("SELECT seq FROM persched_changes WHERE id = 1"))
            return int(rows.scalar_one()), int(seq.scalar_one())
    finally:
        engine.dispose()


def measure(url: str, n: int, *, replace: bool) -> dict[str, object]:
    record: dict[str, object] = {"workload": "declare_many", "engine": make_url(url).get_backend_name(), "jobs": n}
    sched = JobScheduler(url)  # never started: no dispatcher
    try:
        sched.jobs()  # the schema, before the clock starts
        for step, interval in (("declare", 60.0), ("redeclare", 60.0), *((("replace", 90.0),) if replace else ())):
            declared = specs(n, interval)
            _, seq_before = _written(url, "1970-01-02")
            since = datetime.now(timezone.utc).replace(tzinfo=None).isoformat(sep=" ")
            started, cpu = time.perf_counter(), time.process_time()
            result = sched.declare(declared, prune=True)
            record[f"{step}_s"] = round(time.perf_counter() - started, 3)
            record[f"{step}_cpu_s"] = round(time.process_time() - cpu, 3)
            assert len(result) == n, len(result)
            rows, seq_after = _written(url, since)
            record[f"{step}_rows_written"] = rows
            record[f"{step}_changes"] = seq_after - seq_before
            record[f"{step}_result"] = [len(result.created), len(result.replaced), len(result.unchanged)]
    finally:
        sched.shutdown()
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="sqlite", help="'sqlite' (a fresh file) or a server URL (a throwaway schema)")
    p.add_argument("--jobs", type=int, nargs="+", default=[10_000])
    p.add_argument("--replace", action="store_true", help="also declare every spec with a new interval")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        for n in args.jobs:
            with fresh_database(args.db, directory) as url:
                print(json.dumps(measure(url, n, replace=args.replace)), flush=True)  # noqa: T201 - the output


if __name__ == "__main__":
    main()
