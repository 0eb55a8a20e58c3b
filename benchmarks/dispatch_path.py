"""The store's dispatch path alone: `Store.claim_runs` then `Store.finish_runs`, batch after batch.

No threads, no heap, no clock: one process claims `--batch` due jobs in one
transaction and records their outcomes in the next, `--cycles` times, on a
SQLite file made by persched's own migrations (synchronous=FULL, WAL). This is
the part of a dispatch cycle that the job's policies touch (each
won row's plan decides its slot and next slot), so it is the number to
compare between commits: run it from two checkouts, interleaved, and compare
the medians. Prints one JSON line: runs_per_s (claims + completions per
second), median of `--reps`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import _common as c
from persched._model.instant import Instant, Micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, Completion, Store
from persched._store import db as _db
from persched._store import migrate as _migrate

T = 1_800_000_000_000_000  # microseconds
S = 1_000_000  # one second


def measure(batch: int, cycles: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        engine = _db.make_engine(f"sqlite:///{Path(directory) / 'dispatch.db'}")
        _migrate.upgrade(engine)
        store = Store(engine, "bench")
        for i in range(batch):
            definition = validate_definition(f"j{i}", "benchmarks.targets:noop", validate_policies(1.0), (), {}, 0.0)
            store.upsert_job(definition, Instant(T))
        started = time.perf_counter()
        for k in range(cycles):
            now = Instant(T + k * S + S // 2)
            entries = [(f"j{i}", 1, Instant(T + k * S), now) for i in range(batch)]
            claims = store.claim_runs(entries, now, "bench", Micros(30 * S))
            done = [
                Completion(claim, "ok", None, Instant(now + S // 10)) for claim in claims if isinstance(claim, Claim)
            ]
            assert len(done) == batch, "every entry is due and must win"
            store.finish_runs(done, "bench")
        elapsed = time.perf_counter() - started
        engine.dispose()
    return batch * cycles / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=256, help="claims per transaction (the dispatcher's max batch)")
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    rates = [measure(args.batch, args.cycles) for _ in range(args.reps)]
    c.emit({"workload": "dispatch_path", "batch": args.batch, "runs_per_s": round(statistics.median(rates), 1)})


if __name__ == "__main__":
    main()
