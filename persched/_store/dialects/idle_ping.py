"""A pooled server connection is pinged before use only after it sat idle, not at every checkout.

``pool_pre_ping`` costs a round trip per dispatch transaction. A connection
used within `PING_AFTER_IDLE` is handed out as it is: if the server dropped
it, its first statement fails as a disconnect, the pool is invalidated and the
store retries the transaction (`Dialect.is_transient`).
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
    """`engine`, its pool pinging a connection at checkout only if idle over `idle` seconds (no ``pool_pre_ping``)."""

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
