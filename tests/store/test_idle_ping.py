"""A pooled connection the server dropped costs no transaction, without a ping at every checkout.

The server engines ping a pooled connection only when it sat idle for a while
(`persched._store.dialects.idle_ping`). Checked out again soon, a connection the
server dropped fails its first statement, and the store's transaction is retried
on a new one; idle for longer, it is pinged and replaced before any statement.
Both are checked on PostgreSQL and MariaDB by ending the server side of the
store's pooled connection (``pg_terminate_backend``, ``KILL``), then reading a
job through the store.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from persched._store.dialects import idle_ping
from tests.support.engines import engine_params
from tests.support.helpers import db_sql, wait_until

if TYPE_CHECKING:
    from persched._store import Store

SERVERS = engine_params("postgres", "mariadb")
RETRIED = "failed (attempt 1 of"  # the store's warning when it retries a transaction (persched._store._tx)


class _Clock:
    """`idle_ping.monotonic`, moved on by hand."""

    def __init__(self) -> None:
        self.now = 1_000.123

    def __call__(self) -> float:
        return self.now


def _drop_the_pooled_connection(store: Store, db_url: str) -> None:
    """End the server side of the store's one pooled connection; return once the server lists it no more."""
    postgres = store.engine.dialect.name == "postgresql"
    with store.engine.connect() as conn:  # the pool's one connection, checked in again at the end
        own = conn.exec_driver_sql("SELECT pg_backend_pid()" if postgres else "SELECT CONNECTION_ID()").scalar()
    assert isinstance(own, int)
    if postgres:
        db_sql(db_url, "SELECT pg_terminate_backend(:pid)", pid=own)
        listed = "SELECT count(*) FROM pg_stat_activity WHERE pid = :id"
    else:
        db_sql(db_url, f"KILL CONNECTION {own}")
        listed = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = :id"
    wait_until(lambda: db_sql(db_url, listed, id=own)[0][0] == 0, message="the server ended the connection")


@pytest.mark.parametrize("engine_name", SERVERS, indirect=True)
def test_a_dropped_connection_checked_out_soon_fails_once_and_is_retried(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(idle_ping, "monotonic", _Clock())
    _drop_the_pooled_connection(store, db_url)
    with caplog.at_level(logging.WARNING, logger="persched"):
        assert store.get_job("nobody") is None
    assert caplog.text.count(RETRIED) == 1  # not pinged: its first statement found it gone


@pytest.mark.parametrize("engine_name", SERVERS, indirect=True)
def test_a_dropped_connection_idle_for_a_while_is_pinged_and_replaced(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    monkeypatch.setattr(idle_ping, "monotonic", clock)
    _drop_the_pooled_connection(store, db_url)
    clock.now += idle_ping.PING_AFTER_IDLE + 0.001
    with caplog.at_level(logging.WARNING, logger="persched"):
        assert store.get_job("nobody") is None
    assert RETRIED not in caplog.text  # replaced at checkout: no statement failed
