"""A pooled server connection is pinged before use only after it sat idle, not at every checkout.

SQLAlchemy's ``pool_pre_ping`` sends a round trip at every checkout: one more per
dispatch transaction. A connection checked in within the last `PING_AFTER_IDLE`
is handed out as it is. If the server dropped it meanwhile (a restart), its
first statement fails as a disconnect: SQLAlchemy invalidates it, and with it
every connection the pool held from before; the store retries the transaction
on a new connection (`Dialect.is_transient`). A connection idle for longer (the
heartbeat's after a quiet spell; every pooled one after a restart that took
longer) is pinged first and, dead, replaced by the pool, as with pre-ping.
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING, Final

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

PING_AFTER_IDLE: Final = 1.0  # seconds: a dispatcher at work checks its connections out far more often
_CHECKED_IN: Final = "persched_checked_in"  # ConnectionPoolEntry.info: monotonic() at its last checkin


def ping_after_idle(engine: Engine, idle: float = PING_AFTER_IDLE) -> Engine:
    """`engine`, its pool pinging a connection at checkout only if it was checked in more than `idle`
    seconds ago (create it without ``pool_pre_ping``)."""

    def checked_in(dbapi_connection: DBAPIConnection | None, entry: ConnectionPoolEntry) -> None:
        entry.info[_CHECKED_IN] = monotonic()

    def checked_out(
        dbapi_connection: DBAPIConnection, entry: ConnectionPoolEntry, proxy: PoolProxiedConnection
    ) -> None:
        since = entry.info.get(_CHECKED_IN)
        if since is None or monotonic() - since <= idle:
            return  # new, or in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection idle for {monotonic() - since:.1f} s is gone") from exc

    event.listen(engine, "checkin", checked_in)
    event.listen(engine, "checkout", checked_out)
    return engine
