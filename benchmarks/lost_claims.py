"""Lost claims: instance B claims 8 entries whose rows instance A runs, so all lose.

What a losing instance pays per batch when several instances race for the same slots: the
claim, then the read of where each lost row stands. Prints one JSON line: the median
microseconds per batch over `--reps` repetitions of `--batches` batches. On PostgreSQL the
database's ``public`` schema is dropped first: give it a database of its own. Usage::

    python -m benchmarks.lost_claims --db postgresql+psycopg://postgres@127.0.0.1:5432/bench_mine
    python -m benchmarks.lost_claims --db sqlite:////tmp/lost.db
"""

from __future__ import annotations

import argparse
import statistics
import time

from sqlalchemy import text

from benchmarks import _common as c
from persched._model.instant import Instant, Micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Store
from persched._store import db as _db
from persched._store import migrate as _migrate

T = 1_800_000_000_123_457  # microseconds: an odd instant
S = 1_000_000  # one second
ENTRIES = 8  # the default worker count's batch on a loaded instance


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--db", required=True, help="a SQLAlchemy URL (a fresh SQLite file, or a database of its own)")
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    engine = _db.make_engine(args.db)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    _migrate.upgrade(engine)
    store = Store(engine, "bench")
    for i in range(ENTRIES):
        definition = validate_definition(f"j{i}", "benchmarks.targets:noop", validate_policies(1.0), (), {}, 0.0)
        store.upsert_job(definition, Instant(T))
    now = Instant(T + S // 2)
    entries = [(f"j{i}", 1, Instant(T), now) for i in range(ENTRIES)]
    assert all(isinstance(r, Claim) for r in store.claim_runs(entries, now, "A", Micros(30 * S)))
    per_batch = []
    for _ in range(args.reps):
        started = time.perf_counter()
        for _ in range(args.batches):
            assert not any(isinstance(r, Claim) for r in store.claim_runs(entries, now, "B", Micros(30 * S)))
        per_batch.append((time.perf_counter() - started) / args.batches * 1e6)
    engine.dispose()
    c.emit(
        {
            "workload": "lost_claims",
            "engine": engine.dialect.name,
            "entries": ENTRIES,
            "us_per_batch": round(statistics.median(per_batch)),
            "spread": sorted(map(round, per_batch)),
        }
    )


if __name__ == "__main__":
    main()
