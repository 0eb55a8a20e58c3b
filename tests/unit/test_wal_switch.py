"""Switching a SQLite file to WAL while other processes open it (persched._store.dialects.sqlite._ensure_wal)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from persched._store.dialects.sqlite import _ensure_wal


class _Cursor:
    """Answers PRAGMA journal_mode like SQLite; the first `busy` calls are "database is locked"."""

    def __init__(self, mode: str, busy: int) -> None:
        self.mode = mode
        self.busy = busy
        self.statements: list[str] = []

    def execute(self, statement: str) -> _Cursor:
        self.statements.append(statement)
        if self.busy:
            self.busy -= 1
            raise sqlite3.OperationalError("database is locked")
        if statement == "PRAGMA journal_mode = WAL":
            self.mode = "wal"
        return self

    def fetchone(self) -> tuple[str]:
        return (self.mode,)


def _run(cursor: _Cursor, timeout: float) -> None:
    _ensure_wal(cursor, timeout)  # type: ignore[arg-type]  # a stand-in for sqlite3.Cursor


def test_a_file_already_in_wal_mode_is_not_switched_again() -> None:
    cursor = _Cursor("wal", busy=0)
    _run(cursor, 1.0)
    assert cursor.statements == ["PRAGMA journal_mode"]


def test_a_locked_switch_is_retried_until_it_succeeds() -> None:
    """Another process recovering the WAL answers "locked" without the busy handler."""
    cursor = _Cursor("delete", busy=3)
    _run(cursor, 5.0)
    assert cursor.mode == "wal"
    assert cursor.statements[-1] == "PRAGMA journal_mode = WAL"


def test_a_switch_locked_past_the_busy_timeout_raises() -> None:
    cursor = _Cursor("delete", busy=10**9)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _run(cursor, 0.05)


def test_other_errors_are_not_retried() -> None:
    class Broken(_Cursor):
        def execute(self, statement: str) -> Any:  # noqa: ANN401 - never returns
            self.statements.append(statement)
            raise sqlite3.OperationalError("disk I/O error")

    cursor = Broken("delete", busy=0)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _run(cursor, 5.0)
    assert len(cursor.statements) == 1
