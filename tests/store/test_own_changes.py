"""`Store.only_own_changes`: whether a run of change-counter values holds only this store's own.

The change pick-up asks it before reading the changed rows (persched._engine.change_pickup):
a change of another store on the same database, or none at all, is never taken for one's own.
"""

from __future__ import annotations

from persched._store import Store
from persched._store import db as _db
from tests.store.test_store_contract import T, schedule


def test_own_values_are_taken_once_and_another_stores_value_is_not_own(store: Store, db_url: str) -> None:
    before = store.change_seq()
    schedule(store, job_id="a")
    store.deschedule_job("a", T)
    mine = store.change_seq()
    assert not store.only_own_changes(mine, mine)  # no value at all
    assert store.only_own_changes(before, mine)
    assert not store.only_own_changes(before, mine)  # taken: forgotten
    engine = _db.make_engine(db_url)
    try:
        schedule(Store(engine, _db.mask(engine.url)), job_id="b")  # another process, as far as `store` knows
    finally:
        engine.dispose()
    schedule(store, job_id="c")
    assert not store.only_own_changes(mine, store.change_seq())
