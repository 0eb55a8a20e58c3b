"""A fork waits until no thread of this process is inside SQLite.

SQLite's library keeps process-wide mutexes (its memory accounting, its list
of open files), taken inside nearly every call. A ``fork()`` taken while
another thread is inside such a call copies a mutex locked by a thread the
child does not have, and the child's first ``sqlite3.connect()`` waits on it
forever: a pre-fork server whose master runs a scheduler (gunicorn
``--preload`` with a scheduler made at import) saw about four workers in ten
hang at their first request while the master's scheduler was busy.

So the store's threads use SQLite only while holding a share of `FORK_GATE`
(`Transactions._transaction`, the commit watch of persched._engine.pickup),
and ``os.register_at_fork`` makes every fork of this process wait until no
other thread holds one; a share asked for meanwhile waits until the fork is
done. Shares are per thread and nest, so a thread that forks inside its own
transaction waits only for the others. A fork waits at most `FORK_WAIT`
seconds (a transaction in SQLite's busy handler may take the busy timeout),
then goes ahead with a warning. PostgreSQL and MariaDB drivers hold no such
mutex: their stores take no share.

What is gated is persched's own SQLite, and only that: the store's
transactions, whichever thread runs them (a job that calls ``schedule()``
included), and the commit watch. Not gated: what a caller's own thread does
while it opens a database or migrates (`open_engine`, `migrate`), and the
code of a job, which runs outside any share: a job that uses SQLite itself,
or any other thread of the application that does, can still be inside SQLite
at a fork (docs/reference/behaviour.md#forks). Holding a share around a job
would hold every fork for as long as the longest job runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["FORK_GATE", "FORK_WAIT", "ForkGate"]

logger = logging.getLogger(__name__)

FORK_WAIT: Final = 10.0  # seconds a fork waits for the transactions in flight


class ForkGate:
    """Shares held by the threads that use SQLite, and a fork that waits for them (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shares = 0  # held, by all threads
        self._forking = False
        self._depth = threading.local()  # this thread's nesting of `share`

    @contextlib.contextmanager
    def share(self) -> Iterator[None]:
        """Hold a share while the block uses SQLite: no fork is taken meanwhile."""
        depth: int = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._cond:
                while self._forking:
                    self._cond.wait()
                self._shares += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                with self._cond:
                    self._shares -= 1
                    if self._shares == 0:
                        self._cond.notify_all()

    def before_fork(self) -> None:
        """Wait until only this thread holds a share; the gate stays locked through the fork."""
        own = self._held_here()
        self._cond.acquire()
        self._forking = True
        deadline = time.monotonic() + FORK_WAIT
        while self._shares > own:
            left = deadline - time.monotonic()
            if left <= 0:
                logger.warning(
                    "fork() in process %d went ahead while %d SQLite transaction(s) of persched were still "
                    "in flight after %.0f s; the child may hang at its first SQLite call",
                    os.getpid(),
                    self._shares - own,
                    FORK_WAIT,
                )
                break
            self._cond.wait(left)

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._cond.notify_all()
        self._cond.release()

    def after_fork_in_child(self) -> None:
        # The only thread here is the one that forked: only its own share, if any, is held.
        self._cond = threading.Condition()
        self._shares = self._held_here()
        self._forking = False

    def _held_here(self) -> int:
        """The shares this thread holds: 1 inside `share` (however deeply nested), else 0."""
        return 1 if getattr(self._depth, "n", 0) else 0


FORK_GATE: Final = ForkGate()
os.register_at_fork(
    before=FORK_GATE.before_fork,
    after_in_parent=FORK_GATE.after_fork_in_parent,
    after_in_child=FORK_GATE.after_fork_in_child,
)
