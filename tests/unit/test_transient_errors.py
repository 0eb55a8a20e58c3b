"""Which database failures the store retries (docs/multi.md, "When an instance dies")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine

from persched._store import Store
from persched.errors import StoreError

if TYPE_CHECKING:
    from pathlib import Path


def test_a_refused_postgresql_connection_is_retried_then_a_store_error(caplog: pytest.LogCaptureFixture) -> None:
    """A server that is restarting refuses connections: retried with backoff, not given up at once."""
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")  # nothing listens on port 1
    store = Store(engine, "postgresql+psycopg://postgres@127.0.0.1:1/test", retry_attempts=3)
    with caplog.at_level(logging.WARNING, logger="persched"), pytest.raises(StoreError, match="connection"):
        store.get_job("a")
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    engine.dispose()


def test_a_corrupt_sqlite_file_is_not_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Only "busy/locked" is transient on SQLite: other errors fail at once."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 100)
    engine = create_engine(f"sqlite:///{path}")
    store = Store(engine, str(path), retry_attempts=3)
    with caplog.at_level(logging.WARNING, logger="persched"), pytest.raises(StoreError):
        store.get_job("a")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    engine.dispose()
