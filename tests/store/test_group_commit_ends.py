"""A group commit ends while writes keep coming: its leader commits the writes it has, and those that
arrive later wait for the next group, however many threads there are.

Each caller has at most one write queued, but the callers need not be a fixed set of threads: a server
that starts a thread per request brings a new caller while the group's bodies run, as long as requests
come. A group that took every write queued before its COMMIT would then hold its transaction open (and,
on SQLite, the one writer, which the dispatcher's claims wait for) for as long as the stream lasts, and
every caller in it would wait that long.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

from tests.conftest import TIMEOUT
from tests.support.helpers import wait_until

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from persched._store import Store

STREAM: Final = 300  # writes, each arriving while the one before it runs: far more than one group takes


def test_a_group_commits_while_new_callers_keep_arriving(store: Store) -> None:
    first_returned = threading.Event()
    callers: list[threading.Thread] = []

    def body(conn: Connection) -> int:
        # While this write runs in a group, the next caller arrives (a new thread) and queues its own.
        if not first_returned.is_set() and len(callers) < STREAM:
            queued = len(store._group_queue)
            caller = threading.Thread(target=store._write_grouped, args=(body, "test"), name="test-caller")
            callers.append(caller)
            caller.start()
            wait_until(lambda: len(store._group_queue) > queued, message="the next caller queued")
        return store._bump_change_seq(conn)

    try:
        store._write_grouped(body, "test")
        arrived = len(callers)
        first_returned.set()
    finally:
        first_returned.set()
        for caller in callers:
            caller.join(TIMEOUT)
    assert not any(caller.is_alive() for caller in callers)
    assert arrived < STREAM, "the first caller's commit waited for every write that arrived while it was open"
