"""The teardown check of tests/conftest.py (`_no_checked_out_connections`) can fail.

`CheckoutTracker` is what that autouse fixture runs around every test; here a
tracker of our own sees a connection left checked out, names the test and the
count, and agrees with the pool's own ``checkedout()``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import QueuePool

from persched._store import db as _db
from tests.support.helpers import TIMEOUT
from tests.support.pools import CheckoutTracker

if TYPE_CHECKING:
    from pathlib import Path


def test_a_connection_left_checked_out_fails_the_check_with_the_test_and_the_count(tmp_path: Path) -> None:
    engine = _db.make_engine(f"sqlite:///{tmp_path / 'leak.db'}")
    tracker = CheckoutTracker()
    tracker.start()
    try:
        leaked = engine.connect()
        assert isinstance(engine.pool, QueuePool)
        assert len(tracker.checked_out()) == engine.pool.checkedout() == 1
        with pytest.raises(
            AssertionError, match=r"^tests/x\.py::test_y: 1 SQLAlchemy connection\(s\) left checked out"
        ):
            tracker.check("tests/x.py::test_y")
        leaked.close()
        tracker.check("tests/x.py::test_y")  # returned: passes
    finally:
        tracker.stop()
        engine.dispose()


def test_connections_of_any_engine_and_thread_are_counted(tmp_path: Path) -> None:
    """A plain `create_engine` counts too, and a connection held by another thread is named by that thread."""
    engine = create_engine(f"sqlite:///{tmp_path / 'plain.db'}")
    tracker = CheckoutTracker()
    tracker.start()
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            holding.set()
            done.wait(TIMEOUT)

    t = threading.Thread(target=hold, name="test-holder", daemon=True)
    try:
        t.start()
        assert holding.wait(TIMEOUT)
        with pytest.raises(AssertionError, match=r"1 SQLAlchemy connection\(s\).*\['test-holder'\]"):
            tracker.check("t")
    finally:
        done.set()
        t.join(TIMEOUT)
        tracker.stop()
        engine.dispose()
    tracker.check("t")


def test_a_connection_checked_out_before_the_tracker_started_is_not_counted(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'before.db'}")
    conn = engine.connect()
    tracker = CheckoutTracker()
    tracker.start()
    try:
        conn.close()
        tracker.check("t")
    finally:
        tracker.stop()
        engine.dispose()
