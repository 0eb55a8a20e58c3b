"""Shared plumbing for the workload scripts: output, set-up, the two systems under test.

Set-up is never measured. Jobs are written straight into the SQLite file with
``executemany`` (persched's table after its own migration has created the
schema; APScheduler's table with pickled job states built by APScheduler's own
`Job` class), so that 10,000 or 1,000,000 jobs take seconds, not minutes, and
both systems start from the same kind of file.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import pickle
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from apscheduler.schedulers.background import BackgroundScheduler
    from sqlalchemy import Engine

SYSTEMS = ("persched", "apscheduler3")
_TEMP_DIRS: list[str] = []  # made by db_path; removed by finish
APS_TABLE = "apscheduler_jobs"


# -- output ---------------------------------------------------------------------------


def emit(record: dict[str, Any]) -> None:
    """Print one measurement as one JSON line (the runner collects these)."""
    print(json.dumps(record, sort_keys=False), flush=True)  # noqa: T201 - the scripts' output


def finish(code: int = 0) -> None:
    """Leave now: flush and skip atexit hooks (a stalled scheduler must not hold the process).

    Temporary directories made by `db_path` are removed first.
    """
    for directory in _TEMP_DIRS:
        shutil.rmtree(directory, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class CountingHandler(logging.Handler):
    """Counts WARNING+ records per level name instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1
        self.first.setdefault(record.levelname, record.getMessage()[:200])


def quiet_logging() -> CountingHandler:
    """Route persched's and APScheduler's WARNING+ records to a counter (both treated alike)."""
    handler = CountingHandler()
    for name in ("persched", "apscheduler"):
        log = logging.getLogger(name)
        log.addHandler(handler)
        log.propagate = False
        log.setLevel(logging.WARNING)
    return handler


def log_summary(handler: CountingHandler) -> dict[str, Any]:
    """The counts of WARNING/ERROR records, and the first message of each level."""
    return {"log_counts": dict(handler.counts), "log_first": handler.first}


# -- process readings ---------------------------------------------------------------


def rss_bytes() -> int:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def written_bytes() -> int | None:
    """Bytes this process has caused to be written to storage (``/proc/self/io``; None elsewhere)."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("write_bytes"))
    except (OSError, StopIteration):
        return None


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None for none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# -- arguments ------------------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every workload shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker threads (default: each system's own, as a user gets it: persched 32, APScheduler 10)",
    )
    p.add_argument("--dir", default=None, help="directory for the SQLite file (default: a new temp dir)")
    p.add_argument(
        "--aps-grace",
        default="default",
        help="APScheduler misfire_grace_time: 'default' (1 s), 'none', or seconds",
    )
    return p


APS_DEFAULT_WORKERS: Final = 10  # APScheduler 3's ThreadPoolExecutor()


def workers(args: argparse.Namespace) -> int:
    """The worker threads of a run: ``--workers``, or what a user of the system gets without
    choosing (README.md, "Common settings": defaults against defaults)."""
    if args.workers:
        return int(args.workers)
    if args.system == "persched":
        from persched._engine.config import DEFAULT_WORKERS

        return DEFAULT_WORKERS
    return APS_DEFAULT_WORKERS


def db_path(directory: str | None, name: str = "bench.db") -> str:
    """A fresh SQLite file path (removing an old file and its WAL)."""
    if directory is None:
        directory = tempfile.mkdtemp(prefix="persched-bench-")
        _TEMP_DIRS.append(directory)
    path = os.path.join(directory, name)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def spread_intervals(n: int, low: float = 0.1, high: float = 1.0) -> list[float]:
    """`n` intervals spread evenly over [low, high] (ms resolution)."""
    if n == 1:
        return [low]
    return [round(low + (high - low) * i / (n - 1), 3) for i in range(n)]


def phase(i: int) -> float:
    """A well spread fraction in [0, 1) for job `i` (golden-ratio sequence)."""
    return (i * 0.6180339887498949) % 1.0


def offered_slots(intervals: Iterable[float], window: float) -> int:
    """Sum over jobs of floor(window / interval): the runs a window offers."""
    return sum(math.floor(window / interval + 1e-9) for interval in intervals)


# -- persched ---------------------------------------------------------------------------


def sqlite_text(epoch: float) -> str:
    """Epoch seconds -> the naive-UTC text SQLAlchemy stores in SQLite DateTime columns."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def persched_create(path: str) -> None:
    """Create persched's schema in `path` the ordinary way (start, then shut down)."""
    from persched import JobScheduler

    scheduler = JobScheduler(path, workers=1)
    scheduler.start()
    scheduler.shutdown(wait=True, timeout=10)


def persched_populate_url(url: str, rows: Iterable[tuple[str, str, float, float]]) -> int:
    """`persched_populate` on any engine (``--db URL``: PostgreSQL, MySQL, MariaDB) through SQLAlchemy Core.

    Empties persched's tables of that database first: point ``--db`` at a database of its own.
    """
    from datetime import datetime, timezone

    from sqlalchemy import delete, insert

    from persched._store.db import make_engine
    from persched._store.schema import jobs, runs

    def at(epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, timezone.utc)

    now = at(time.time())
    values = [
        {
            "job_id": job_id,
            "target": target,
            "args": "[]",
            "kwargs": "{}",
            "interval_seconds": interval,
            "first_run_at": at(first_at),
            "next_run_at": at(first_at),
            "generation": 1,
            "state": "scheduled",
            "created_at": now,
            "updated_at": now,
        }
        for job_id, target, interval, first_at in rows
    ]
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(delete(runs))
            conn.execute(delete(jobs))
            conn.execute(insert(jobs), values)
    finally:
        engine.dispose()
    return len(values)


def persched_populate(path: str, rows: Iterable[tuple[str, str, float, float]]) -> int:
    """Insert ``(job_id, target, interval_seconds, first_run_at epoch)`` rows as scheduled jobs.

    Covers every NOT NULL column of `persched._store.schema.jobs` that has no
    server default, and fails loudly if the schema grew one we don't know.
    """
    from persched._store.schema import jobs

    now = sqlite_text(time.time())
    known = {
        "job_id",
        "target",
        "args",
        "kwargs",
        "interval_seconds",
        "first_run_at",
        "next_run_at",
        "generation",
        "state",
        "created_at",
        "updated_at",
    }
    missing = [c.name for c in jobs.columns if not c.nullable and c.server_default is None and c.name not in known]
    if missing:
        raise RuntimeError(f"persched_populate does not know the NOT NULL columns {missing}; update benchmarks")
    columns = sorted(known)
    sql = f"INSERT INTO {jobs.name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"  # noqa: S608 - names from our own schema

    def values() -> Iterable[tuple[Any, ...]]:
        for job_id, target, interval, first_at in rows:
            first = sqlite_text(first_at)
            record = {
                "job_id": job_id,
                "target": target,
                "args": "[]",
                "kwargs": "{}",
                "interval_seconds": interval,
                "first_run_at": first,
                "next_run_at": first,
                "generation": 1,
                "state": "scheduled",
                "created_at": now,
                "updated_at": now,
            }
            yield tuple(record[c] for c in columns)

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        count = conn.executemany(sql, values()).rowcount
        conn.execute("COMMIT")
    finally:
        conn.close()
    return count


def persched_probe_now(path: str, job_id: str, when: float) -> None:
    """Make `job_id` due at `when` (start-up workload: the first run proves dispatching)."""
    from persched._store.schema import jobs

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            f"UPDATE {jobs.name} SET next_run_at = ?, state = 'scheduled', owner = NULL, lease_until = NULL "  # noqa: S608 - our own table name
            "WHERE job_id = ?",
            (sqlite_text(when), job_id),
        )
    finally:
        conn.close()


# -- APScheduler 3 ------------------------------------------------------------------------


def aps_grace(text: str) -> int | str | None:
    """Parse --aps-grace: 'default' keeps APScheduler's default (1 s)."""
    if text == "default":
        return "default"
    if text == "none":
        return None
    return int(text)


def aps_engine(path: str, synchronous: str = "FULL") -> Engine:
    """A SQLAlchemy engine on `path` in WAL mode (APScheduler's best setting) at `synchronous`."""
    from sqlalchemy import create_engine, event

    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, record: Any) -> None:  # noqa: ANN401 - DBAPI connection
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.close()

    return engine


def aps_synchronous(engine: Engine) -> str:
    """Read back the synchronous level a pooled connection really has."""
    with engine.connect() as conn:
        level = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return f"{names.get(int(level or 0), level)}/{mode}"


def aps_scheduler(path: str, workers: int, grace: int | str | None) -> tuple[BackgroundScheduler, Engine]:
    """A BackgroundScheduler with a SQLAlchemyJobStore on `path` and a ThreadPoolExecutor(`workers`)."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    engine = aps_engine(path)
    defaults: dict[str, Any] = {}
    if grace != "default":
        defaults["misfire_grace_time"] = grace
    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(engine=engine, tablename=APS_TABLE)},
        executors={"default": ThreadPoolExecutor(workers)},
        job_defaults=defaults,
        timezone=timezone.utc,
    )
    return scheduler, engine


def aps_populate(
    path: str,
    rows: Iterable[tuple[str, str, float, float, tuple[Any, ...]]],
    grace: int | str | None = "default",
) -> int:
    """Insert ``(job_id, "module:function", interval, first run epoch, args)`` as APScheduler jobs.

    The pickled states come from APScheduler's own `Job` and `IntervalTrigger`,
    exactly as its `SQLAlchemyJobStore.add_job` would write them.
    """
    from apscheduler.job import Job
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.triggers.interval import IntervalTrigger

    engine = aps_engine(path, synchronous="OFF")
    store = SQLAlchemyJobStore(engine=engine, tablename=APS_TABLE)
    store.jobs_t.create(engine, checkfirst=True)
    engine.dispose()
    misfire = 1 if grace == "default" else grace
    owner = SimpleNamespace(timezone=timezone.utc)  # Job only reads its scheduler's timezone here

    def values() -> Iterable[tuple[str, float, bytes]]:
        for job_id, func, interval, first_at, args in rows:
            first = datetime.fromtimestamp(first_at, timezone.utc)
            trigger = IntervalTrigger(seconds=interval, start_date=first, timezone=timezone.utc)
            job = Job(
                owner,
                id=job_id,
                func=func,
                trigger=trigger,
                executor="default",
                args=args,
                kwargs={},
                name=job_id,
                misfire_grace_time=misfire,
                coalesce=True,
                max_instances=1,
                next_run_time=first,
            )
            yield job_id, first.timestamp(), pickle.dumps(job.__getstate__(), pickle.HIGHEST_PROTOCOL)

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        count = conn.executemany(
            f"INSERT INTO {APS_TABLE} (id, next_run_time, job_state) VALUES (?, ?, ?)",  # noqa: S608 - constant
            values(),
        ).rowcount
        conn.execute("COMMIT")
    finally:
        conn.close()
    return count


def aps_probe_now(path: str, job_id: str, func: str, when: float) -> None:
    """Make APScheduler's `job_id` due at `when`, with no misfire limit (start-up workload)."""
    rows = [(job_id, func, 3600.0, when, ())]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"DELETE FROM {APS_TABLE} WHERE id = ?", (job_id,))  # noqa: S608 - constant
    finally:
        conn.close()
    aps_populate(path, rows, grace=None)
