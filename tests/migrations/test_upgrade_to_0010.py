"""Revision 0010 upgrades in place: timed pauses and the instance rows that a read-only check judges.

A database at 0009 with an instance row (written by a sharing scheduler, the
only kind that kept one then) keeps the row, marked as sharing and with no
``lease_until`` (not alive to a reader of the database until its scheduler,
now at 0010, beats again). A job paused before 0010 stays paused, without an
end or a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from sqlalchemy import text

from persched import JobScheduler
from persched._model.instant import Instant, micros
from persched._store import Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store.health import live_instances
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, sql

if TYPE_CHECKING:
    from pathlib import Path

START = 1_700_000_000.25


def test_a_0009_database_keeps_its_rows_and_gains_the_new_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = _db.make_engine(url)
    try:
        with engine.begin() as conn:
            cfg = _migrate._config(conn)
            command.upgrade(cfg, "0009")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO persched_instances (namespace, instance_id, started_at, renewed_at, beats)"
                    " VALUES ('default', 'old-1', '2023-11-14 22:13:20.250000', '2023-11-14 22:13:20.250000', 7)"
                )
            )
    finally:
        engine.dispose()
    clock = FakeClock(START)
    sched = JobScheduler(url, clock=clock)
    sched.schedule("held", "tests.support.jobs:record", 10.0, args=("held",))  # migrates to head
    sched.pause("held")
    assert sql(url, "SELECT version_num FROM persched_alembic_version") == [(_migrate.HEAD,)]
    assert sql(url, "SELECT instance_id, beats, shares, lease_until FROM persched_instances") == [("old-1", 7, 1, None)]
    held = sched.get_job("held")
    assert held is not None
    assert (held.paused, held.paused_until, held.pause_note) == (True, None, None)
    assert sched.next_runs("held") == []
    store = Store(_db.make_engine(url), "test")
    try:
        assert live_instances(store, Instant(micros(START))) == []  # the old row has no lease_until: not alive
    finally:
        store.engine.dispose()
        sched.shutdown(wait=True, timeout=TIMEOUT)
