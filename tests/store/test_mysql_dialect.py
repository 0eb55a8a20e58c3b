"""MySQL/MariaDB specifics of the dialect (persched/_store/dialects/mysql.py) that the contract suite only crosses.

History inserts skip a slot the unique index holds and name only the rows
really inserted, on both of the dialect's paths: MariaDB's multi-row
``INSERT … RETURNING`` (which returns the existing row for a skipped one) and
MySQL 8's one INSERT per row (read back by ``lastrowid``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import func, select

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Completion, Store
from persched._store import db as _db
from persched._store.schema import runs
from tests.support import race_jobs
from tests.support.engines import MigratedDatabases, engine_named
from tests.support.helpers import EPOCH, TIMEOUT, at_us

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.mariadb

T: Final = Instant(micros(EPOCH + 0.1234567))  # an odd instant
ME: Final = "me:1:aaaaaa"
LEASE: Final = Micros(30_000_000)
SLOTS: Final = 100


@pytest.fixture
def store(migrated_databases: MigratedDatabases, tmp_path: Path) -> Iterator[Store]:
    """A `Store` on the emptied session MariaDB database (the contract suite's `store`, MariaDB only)."""
    engine = _db.make_engine(migrated_databases.empty(engine_named("mariadb"), tmp_path))
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


NAMES = ("job_id", "generation", "scheduled_for", "started_at", "instance_id", "lease_until", "run_now")


def _row(store: Store, job_id: str, slot: float, started: float, *, run_now: bool = False) -> tuple[object, ...]:
    """A run's record as the claims insert it (driver values, `Dialect.bind_instant`)."""
    at = store.dialect.bind_instant
    return (job_id, 1, at(at_us(slot)), at(at_us(started)), "me", at(at_us(started + 30)), run_now)


@pytest.mark.parametrize("returning", [True, False], ids=["mariadb-returning", "mysql8-row-by-row"])
def test_history_inserts_skip_a_held_slot_and_name_only_new_rows(
    store: Store, returning: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.engine.dialect, "insert_returning", returning)
    with store.engine.begin() as conn:
        cur = store.dialect.cursor(conn)
        (first,) = store.dialect.insert_new(cur, runs, NAMES, [_row(store, "a", 10, 10)], "job_id, run_id")
        rows = [_row(store, "a", 10, 11), _row(store, "b", 10, 11), _row(store, "a", 10, 11, run_now=True)]
        inserted = store.dialect.insert_new(cur, runs, NAMES, rows, "job_id, run_id")
        total = conn.execute(select(func.count()).select_from(runs)).scalar_one()
    # "a" at slot 10 was held: skipped; "b" and a run-now run of "a" at the same instant are new.
    assert sorted(job_id for job_id, _ in inserted) == ["a", "b"]
    assert first[1] not in {run_id for _, run_id in inserted}
    assert total == 3


def test_claims_of_a_stale_entry_never_make_the_live_claim_pass_the_row_by(store: Store) -> None:
    """Another instance's heap still holds the replaced generation's entry and claims it in a
    loop (each claim misses). The live generation must win every one of its slots: a locking
    read locks each row it looks at before it tests the predicate, so the stale claim used to
    hold the row for a moment, and the live claim's SKIP LOCKED passed it by as if another
    instance were claiming that very slot (and looked again only a slot later)."""
    old, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(30.0), (), {}, None), T)
    job, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    other = Store(_db.make_engine(store.engine.url.render_as_string(hide_password=False)), "other")
    stop = threading.Event()

    def claim_the_stale_entry() -> None:
        far = Instant(T + micros(10_000_000.0))
        while not stop.is_set():
            (miss,) = other.claim_runs([("a", old.generation, far, far)], far, "other:1:bbbbbb", LEASE)
            assert isinstance(miss, ClaimMiss)

    stale = threading.Thread(target=claim_the_stale_entry)
    stale.start()
    lost = []
    try:
        slot = from_datetime(job.next_run_at)
        for _ in range(SLOTS):
            (result,) = store.claim_runs([("a", job.generation, slot, slot)], slot, ME, LEASE)
            if not isinstance(result, Claim):
                lost.append(result)
                continue
            (next_at,) = store.finish_runs([Completion(result, "ok", None, slot)], ME)
            assert next_at is not None
            slot = next_at
    finally:
        stop.set()
        stale.join(TIMEOUT)
        other.engine.dispose()
    assert lost == []
