"""Workload 6, the ceiling: persched's claim UPDATE alone, through SQLAlchemy Core, on the same kind of file.

The engine comes from ``persched._store.db.make_engine`` (WAL, synchronous=FULL,
BEGIN IMMEDIATE: identical PRAGMAs), the table from persched's own migration,
and the statement is the conditional UPDATE ... RETURNING of
``Store.claim_run``, one row per statement. ``--batch`` rows share one
transaction (1: a commit per claim; 100: a hundred claims per commit). When
every row has been claimed they are all put back in one (unmeasured)
transaction. Prints one JSON line with updates_per_s: what the store allows,
against which persched's runs/s is read (each persched run costs at least one
claim and one completion).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import update

from benchmarks import _common as c


def main() -> None:
    p = c.parser(__doc__ or "")
    p.set_defaults(system="persched")
    for action in p._actions:
        if action.dest == "system":
            action.required = False
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--batch", type=int, default=1, help="claims per transaction")
    p.add_argument("--window", type=float, default=10.0)
    args = p.parse_args()
    from persched._store.db import make_engine
    from persched._store.schema import jobs

    path = c.db_path(args.dir)
    c.persched_create(path)
    past = time.time() - 10
    c.persched_populate(path, ((f"j{i}", "benchmarks.targets:noop", 1.0, past) for i in range(args.rows)))
    engine = make_engine(path)  # synchronous=FULL, WAL, BEGIN IMMEDIATE, like JobScheduler
    ids = [f"j{i}" for i in range(args.rows)]
    owner = "bench:ceiling"

    def claim(conn: Any, job_id: str, now: float) -> bool:  # noqa: ANN401 - a Connection
        won = conn.execute(
            update(jobs)
            .where(
                jobs.c.job_id == job_id,
                jobs.c.generation == 1,
                jobs.c.state == "scheduled",
                jobs.c.next_run_at <= datetime.fromtimestamp(now, timezone.utc),
            )
            .values(
                state="running",
                owner=owner,
                lease_until=datetime.fromtimestamp(now + 30, timezone.utc),
                updated_at=datetime.fromtimestamp(now, timezone.utc),
            )
            .returning(jobs.c.next_run_at, jobs.c.first_run_at, jobs.c.interval_seconds, jobs.c.target)
        ).first()
        return won is not None

    done = lost = 0
    spent = cpu = 0.0
    position = 0
    while spent < args.window:
        if position >= len(ids):
            with engine.connect() as conn, conn.begin():  # put the rows back, unmeasured
                conn.execute(update(jobs).values(state="scheduled", owner=None, lease_until=None))
            position = 0
        chunk = ids[position : position + args.batch]
        position += len(chunk)
        t0, cpu0 = time.monotonic(), time.process_time()
        with engine.connect() as conn, conn.begin():
            for job_id in chunk:
                if claim(conn, job_id, time.time()):
                    done += 1
                else:
                    lost += 1
        spent += time.monotonic() - t0
        cpu += time.process_time() - cpu0
    engine.dispose()
    c.emit(
        {
            "workload": "ceiling",
            "system": "ceiling",
            "jobs": args.rows,
            "batch": args.batch,
            "synchronous": "FULL/wal",
            "window_s": round(spent, 3),
            "updates": done,
            "lost": lost,
            "updates_per_s": round(done / spent, 1),
            "cpu_s_per_1000_updates": round(cpu / done * 1000, 4) if done else None,
        }
    )
    c.finish()


if __name__ == "__main__":
    main()
