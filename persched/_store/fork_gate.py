"""A fork waits until no thread of this process is inside SQLite.

A ``fork()`` while another thread is inside SQLite copies a process-wide
mutex that the child can never take (its first connect hangs). So the store's
threads use SQLite only while holding a `FORK_GATE` share
(`Transactions._transaction`, the commit watch), and ``os.register_at_fork``
makes a fork wait, at most `FORK_WAIT`, until no other thread holds one.

``_cond`` guards ``_shares`` and ``_forking``; it is held from
`ForkGate.before_fork` to the end of the fork, so no share starts meanwhile.
Shares are per thread and nest, so a thread forking inside its own
transaction waits only for the others. A job's own code runs outside any
share: docs/explanation/store.md, "Forks and SQLite".
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
    """Shares held by the threads that use SQLite, and a fork that waits for them."""

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
