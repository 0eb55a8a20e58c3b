"""Group commit takes its group as late as it can.

The leader of a group commit (`Transactions._write_grouped`) takes the queued
writes once its transaction has begun (SQLite's writer lock held, BEGIN
sent), not before it asks for them: the writes that arrive meanwhile share
its commit instead of waiting for the next one. With 4 threads churning,
that made about 3.4 writes share a commit instead of 2.4.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from sqlalchemy.exc import IntegrityError

from persched._model.instant import Instant
from persched._model.models import validate_definition, validate_policies
from tests.conftest import TIMEOUT
from tests.support import race_jobs
from tests.support.helpers import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy import Connection

    from persched._store import Store

T = Instant(1_700_000_000_123_457)
WAITING = 5


def test_writes_queued_while_the_leader_begins_share_its_commit(store: Store) -> None:
    release = threading.Event()
    calls: list[str] = []
    real = store._write

    def write(body: Callable[[Connection], Any], what: str) -> Any:  # noqa: ANN401 - the body's result
        calls.append(what)
        if len(calls) == 1:  # the leader, before its transaction begins (as if waiting for the writer lock)
            assert release.wait(TIMEOUT), "never released"
        return real(body, what)

    def upsert(i: int) -> Callable[[], object]:
        definition = validate_definition(f"j{i}", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
        return lambda: store.upsert_job(definition, T)

    results: list[object] = [None] * (WAITING + 1)

    def run(i: int) -> None:
        results[i] = upsert(i)()

    before = store.change_seq()
    threads = [threading.Thread(target=run, args=(i,), name=f"test-writer-{i}") for i in range(WAITING + 1)]
    with patch.object(store, "_write", side_effect=write):
        threads[0].start()
        wait_until(lambda: len(calls) == 1, message="the leader is beginning")
        for thread in threads[1:]:
            thread.start()
        wait_until(lambda: len(store._group_queue) == WAITING, message="the others queued")
        release.set()
        for thread in threads:
            thread.join(TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)
    assert len(calls) == 1  # one transaction, one commit, for the leader and all that queued meanwhile
    assert all(isinstance(r, tuple) and r[1] == "created" for r in results), results
    assert store.change_seq() == before + 1
    assert sorted(j.job_id for j in store.list_jobs()) == [f"j{i}" for i in range(WAITING + 1)]


def test_a_write_alone_that_fails_runs_once(store: Store) -> None:
    runs: list[int] = []

    def conflict(conn: Connection) -> object:
        runs.append(1)
        raise IntegrityError("INSERT", {}, Exception("duplicate key"))

    try:
        store._write_grouped(conflict, "test")
    except IntegrityError:
        pass
    else:  # pragma: no cover - the assertion below says what went wrong
        raise AssertionError("the conflict was not raised")
    assert runs == [1]


def test_writes_queued_while_the_group_runs_share_its_commit(store: Store) -> None:
    """A write queued after the leader took its group, while the group's bodies run, is taken before
    the COMMIT too, instead of waiting for a commit of its own."""
    running, seqs = threading.Event(), {}

    def first(conn: Connection) -> int:
        running.set()
        wait_until(lambda: len(store._group_queue) == 1, message="the second write queued")
        return store._bump_change_seq(conn)

    def second(conn: Connection) -> int:
        return store._bump_change_seq(conn)

    def run(name: str, body: Callable[[Connection], int]) -> None:
        seqs[name] = store._write_grouped(body, "test")

    before = store.change_seq()
    leader = threading.Thread(target=run, args=("first", first), name="test-leader")
    leader.start()
    assert running.wait(TIMEOUT), "the leader's body never ran"
    late = threading.Thread(target=run, args=("second", second), name="test-late")
    late.start()
    for thread in (leader, late):
        thread.join(TIMEOUT)
    assert not leader.is_alive()
    assert not late.is_alive()
    assert seqs == {"first": before + 1, "second": before + 1}  # one transaction, one commit
    assert store.change_seq() == before + 1
