"""MySQL/MariaDB specifics of the dialect (persched/_store/dialects/mysql.py) that the contract suite only crosses.

History inserts skip a slot the unique index holds and name only the rows
really inserted, on both of the dialect's paths: MariaDB's multi-row
``INSERT … RETURNING`` (which returns the existing row for a skipped one) and
MySQL 8's one INSERT per row (read back by ``lastrowid``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select

from persched import _db
from persched._schema import runs
from persched._store import Store
from tests.support.engines import MigratedDatabases, engine_named
from tests.support.helpers import at_us

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.mariadb


@pytest.fixture
def store(migrated_databases: MigratedDatabases) -> Iterator[Store]:
    """A `Store` on the emptied session MariaDB database (the contract suite's `store`, MariaDB only)."""
    engine = _db.make_engine(migrated_databases.empty(engine_named("mariadb")))
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
        (first,) = store.dialect.insert_new(conn, runs, NAMES, [_row(store, "a", 10, 10)], "job_id, run_id")
        rows = [_row(store, "a", 10, 11), _row(store, "b", 10, 11), _row(store, "a", 10, 11, run_now=True)]
        inserted = store.dialect.insert_new(conn, runs, NAMES, rows, "job_id, run_id")
        total = conn.execute(select(func.count()).select_from(runs)).scalar_one()
    # "a" at slot 10 was held: skipped; "b" and a run-now run of "a" at the same instant are new.
    assert sorted(r.job_id for r in inserted) == ["a", "b"]
    assert first.run_id not in {r.run_id for r in inserted}
    assert total == 3
