"""Which SQLAlchemy connections a test left checked out of their pools.

`CheckoutTracker` listens to the ``checkout``, ``checkin`` and ``detach``
events of the `Pool` class, so it sees every pool of every engine, whoever
made it (`persched._store.db.make_engine`, a test's own `create_engine`, an engine
made before the tracker started) and whatever the pool class (StaticPool and
NullPool have no ``checkedout()``; for a QueuePool the count agrees with it).
A connection still out at the end is a leak: an unclosed `Connection`, a
scheduler not shut down, a thread still running a transaction. The events
come from any thread, so the set of connections out is guarded by a lock.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sqlalchemy import event
from sqlalchemy.pool import Pool

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

__all__ = ["CheckoutTracker"]


class CheckoutTracker:
    """Counts the connections checked out of any pool between `start()` and `stop()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._out: dict[int, str] = {}  # id(pool entry) -> the thread that checked it out

    def start(self) -> None:
        """Listen to every pool."""
        event.listen(Pool, "checkout", self._on_checkout)
        event.listen(Pool, "checkin", self._on_return)
        event.listen(Pool, "detach", self._on_return)

    def stop(self) -> None:
        """Stop listening (what is out stays counted)."""
        event.remove(Pool, "checkout", self._on_checkout)
        event.remove(Pool, "checkin", self._on_return)
        event.remove(Pool, "detach", self._on_return)

    def checked_out(self) -> list[str]:
        """The threads that checked out the connections still out, one entry each."""
        with self._lock:
            return sorted(self._out.values())

    def check(self, test: str) -> None:
        """Fail if a connection checked out since `start()` has not been returned.

        Raises:
            AssertionError: Naming `test`, the count and the threads that checked them out.
        """
        out = self.checked_out()
        assert not out, (
            f"{test}: {len(out)} SQLAlchemy connection(s) left checked out after teardown"
            f" (checked out by threads {out}): close every Connection, shut every scheduler down"
        )

    def _on_checkout(
        self, dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, proxy: PoolProxiedConnection
    ) -> None:
        with self._lock:
            self._out[id(record)] = threading.current_thread().name

    def _on_return(self, dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry) -> None:
        with self._lock:
            self._out.pop(id(record), None)  # checked out before start(): not ours to count
