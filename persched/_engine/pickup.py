"""Cheap signals that another connection committed, so that the change pick-up runs at once.

They only hurry `persched._engine.change_pickup`, whose poll stays the backstop
(a lost notification, a reconnect, MariaDB). SQLite: `CommitWatch` asks ``PRAGMA
data_version``, which reads no file, on a connection of its own, on the heartbeat
thread alone. PostgreSQL: `ChangeListener`'s ``persched-listener`` thread LISTENs
on a connection of its own and asks for a pick-up at each notification and after
each (re)connect. It waits in ``select`` on its socket and a pipe that `stop`
writes to, so shutdown never waits for a notification. Its ``_cond`` guards the
stop flag and the pipe and is held for no I/O but that one-byte write. The
listening connection goes back closed: a LISTENing session must not serve the
store's transactions.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import TYPE_CHECKING

from .._model.instant import US_PER_SECOND, Micros
from .._store.db import store_errors
from .._store.fork_gate import FORK_GATE
from ..errors import StoreError
from .tracebacks import describe

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy import Engine
    from sqlalchemy.pool import PoolProxiedConnection

    from .._store.dialects import Dialect
    from ..clock import Clock

__all__ = ["ChangeListener", "CommitWatch"]

logger = logging.getLogger(__name__)


class CommitWatch:
    """Tells whether another connection committed since the last look (SQLite's ``data_version``)."""

    def __init__(self, engine: Engine, dialect: Dialect) -> None:
        self._engine = engine
        self._dialect = dialect
        self._conn: PoolProxiedConnection | None = None
        self._version: int | None = None  # None: not looked yet, so the first look says "changed"
        self._failing = False

    def changed(self) -> bool:
        """True if another connection committed since the last call (also the first call, and after an error)."""
        try:
            with FORK_GATE.share(), store_errors(self._engine):
                if self._conn is None:
                    self._conn = self._engine.raw_connection()
                version = self._dialect.data_version(self._conn.dbapi_connection)  # type: ignore[arg-type]  # open
        except StoreError as exc:
            if not self._failing:  # once, not at every check
                logger.warning("checking for commits by other connections failed, will retry: %s", exc)
            return self._failed()
        except BaseException as exc:  # noqa: BLE001 - runs on the heartbeat thread, which must go on
            if not self._failing:
                logger.error("checking for commits by other connections failed, will retry\n%s", describe(exc))
            return self._failed()
        self._failing = False
        changed, self._version = version != self._version, version
        return changed

    def _failed(self) -> bool:
        self._failing = True
        self.close()
        return True  # the counter's read says whether anything changed

    def close(self) -> None:
        """Give the connection back (idempotent); the next look opens one again."""
        conn, self._conn, self._version = self._conn, None, None
        if conn is not None:
            with FORK_GATE.share():
                conn.close()


class ChangeListener:
    """A thread that calls `wake` (which must not block) when another instance announced a change."""

    def __init__(self, engine: Engine, dialect: Dialect, clock: Clock, retry: Micros, wake: Callable[[], None]) -> None:
        self._engine = engine
        self._dialect = dialect
        self._clock = clock
        self._retry = retry
        self._wake = wake
        self._cond = threading.Condition()
        self._stopping = False
        self._pipe: tuple[int, int] | None = None  # (read, write) end: wakes the select() to stop
        self._thread = threading.Thread(target=self._loop, name="persched-listener", daemon=True)

    def start(self) -> None:
        self._pipe = os.pipe()
        self._thread.start()

    def stop(self) -> None:
        """Make the thread end soon (idempotent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            if self._pipe is not None:
                os.write(self._pipe[1], b"\0")  # one byte into an empty pipe: never blocks

    def join(self, timeout: float | None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self._stopping:
                if not self._listen():
                    self._wait_retry()
        finally:
            with self._cond:
                pipe, self._pipe = self._pipe, None
            if pipe is not None:
                os.close(pipe[0])
                os.close(pipe[1])

    def _listen(self) -> bool:
        """Listen until stopped or the connection is lost (True), or fail to begin (False)."""
        try:
            with store_errors(self._engine):
                conn = self._engine.raw_connection()
        except StoreError as exc:
            logger.warning("cannot connect to listen for changes, will retry: %s", exc)
            return False
        try:
            try:
                with store_errors(self._engine):
                    listener = self._dialect.change_listener(conn.dbapi_connection)  # type: ignore[arg-type]  # open
            except StoreError as exc:
                logger.warning("cannot listen for changes, will retry: %s", exc)
                return False
            logger.debug("listening for changes made by other instances")
            self._wake()  # what committed before LISTEN was announced to nobody
            assert self._pipe is not None
            stop, socket = self._pipe[0], listener.fileno()
            while True:
                ready, _, _ = select.select([socket, stop], [], [])
                if stop in ready:
                    return True
                try:
                    with store_errors(self._engine):
                        announced = listener.announced()
                except StoreError as exc:
                    logger.warning("the connection listening for changes was lost, reconnecting: %s", exc)
                    return True
                if announced:
                    self._wake()
        except BaseException as exc:  # noqa: BLE001 - the listener must outlive a bug; the poll covers meanwhile
            logger.error("listening for changes failed, will retry\n%s", describe(exc))
            return False
        finally:
            conn.invalidate()  # its session LISTENs: closed, never handed to the store
            conn.close()

    def _wait_retry(self) -> None:
        deadline = self._clock.monotonic_us() + self._retry
        with self._cond:
            while not self._stopping and (left := deadline - self._clock.monotonic_us()) > 0:
                self._clock.wait(self._cond, left / US_PER_SECOND)
