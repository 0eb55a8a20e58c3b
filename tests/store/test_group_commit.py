"""Group commit of schedule/deschedule (`Store._write_grouped`).

Writes that arrive while another is committing are committed together, in
arrival order, in one transaction; each caller returns only after the commit
that holds its own write, and a failing write fails alone.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest
from sqlalchemy.exc import IntegrityError

from persched import Job, JobScheduler
from persched._model.instant import Instant
from persched._model.models import JobDefinition, JobState, validate_definition, validate_policies
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.conftest import TIMEOUT
from tests.support import race_jobs
from tests.support.helpers import wait_until
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from sqlalchemy import Connection

    from persched._store import Store

T = Instant(1_800_000_000_000_000)
WAITING = 6  # writers queued behind the held leader


def _hold_first_write(store: Store) -> tuple[threading.Event, list[int], Callable[..., Any]]:
    """Wrap `store._write`: the first transaction, its group taken and its bodies run, waits
    until released before it commits; count the calls (the first once it waits: a write
    queued before the leader took its group joins that group)."""
    release = threading.Event()
    calls: list[int] = []
    real = store._write
    first = threading.Lock()

    def write(body: Callable[[Connection], Any], what: str) -> Any:  # noqa: ANN401 - the body's result
        if not first.acquire(blocking=False):
            calls.append(1)
            return real(body, what)

        def held(conn: Connection) -> Any:  # noqa: ANN401 - the body's result
            result = body(conn)
            calls.append(1)
            assert release.wait(TIMEOUT), "never released"
            return result

        return real(held, what)

    return release, calls, write


def _in_threads(targets: Sequence[Callable[[], object]]) -> tuple[list[threading.Thread], list[object]]:
    results: list[object] = [None] * len(targets)

    def run(i: int, target: Callable[[], object]) -> None:
        try:
            results[i] = target()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, t), name=f"test-writer-{i}") for i, t in enumerate(targets)]
    return threads, results


def test_writes_queued_behind_a_commit_share_the_next_one(store: Store) -> None:
    release, calls, write = _hold_first_write(store)

    def upsert(i: int) -> Callable[[], object]:
        definition = validate_definition(f"j{i}", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
        return lambda: store.upsert_job(definition, T)

    schedule = [upsert(i) for i in range(WAITING + 1)]
    before = store.change_seq()
    with patch.object(store, "_write", side_effect=write):
        first, first_result = _in_threads(schedule[:1])
        first[0].start()
        wait_until(lambda: len(calls) == 1, message="the leader is committing")
        rest, results = _in_threads(schedule[1:])
        for t in rest:
            t.start()
        wait_until(lambda: len(store._group_queue) == WAITING, message="the others queued")
        release.set()
        for t in [*first, *rest]:
            t.join(TIMEOUT)
    assert len(calls) == 2  # the leader's own transaction, then one for all that queued
    assert all(isinstance(r, tuple) and r[1] == "created" for r in [*first_result, *results])
    assert {j.job_id for j in store.list_jobs()} == {f"j{i}" for i in range(WAITING + 1)}
    # One change-counter bump per commit, not per write: the group's changes share its value.
    assert store.change_seq() == before + 2
    seq, changed = store.changes_since(before)
    assert (seq, sorted(job_id for _, job_id, _ in changed)) == (
        before + 2,
        sorted(f"j{i}" for i in range(WAITING + 1)),
    )
    assert len(store.changes_made_elsewhere(before + 1, before + 2)) == 0  # all our own


def test_a_failing_write_in_a_group_fails_alone(store: Store) -> None:
    release, calls, write = _hold_first_write(store)

    def conflict(conn: Connection) -> object:
        raise IntegrityError("INSERT", {}, Exception("duplicate key"))

    def good(i: int) -> Callable[[], object]:
        definition = validate_definition(f"g{i}", race_jobs.RECORD, validate_policies(10.0), (), {}, None)
        return lambda: store.upsert_job(definition, T)

    targets: list[Callable[[], object]] = [good(0), good(1), lambda: store._write_grouped(conflict, "test"), good(2)]
    with patch.object(store, "_write", side_effect=write):
        leader, _ = _in_threads(targets[:1])
        leader[0].start()
        wait_until(lambda: len(calls) == 1, message="the leader is committing")
        group, results = _in_threads(targets[1:])
        for t in group:
            t.start()
        wait_until(lambda: len(store._group_queue) == 3, message="the group queued")
        release.set()
        for t in [*leader, *group]:
            t.join(TIMEOUT)
    assert isinstance(results[1], IntegrityError)
    assert [r[1] for r in (results[0], results[2]) if isinstance(r, tuple)] == ["created", "created"]
    assert {j.job_id: j.state for j in store.list_jobs()} == {f"g{i}": JobState.SCHEDULED for i in range(3)}


def test_a_write_the_driver_refuses_fails_alone_in_its_group(store: Store) -> None:
    """Any exception of one body (here the driver's UnicodeEncodeError,
    not an IntegrityError) fails that body alone; the others commit."""
    release, calls, write = _hold_first_write(store)
    policies = validate_policies(10.0)

    def good(i: int) -> Callable[[], object]:
        definition = validate_definition(f"g{i}", race_jobs.RECORD, policies, (), {}, None)
        return lambda: store.upsert_job(definition, T)

    # Built past validate_definition (which refuses it) to reach the database as a caller's bug would.
    unencodable = JobDefinition("bad\udc80", race_jobs.RECORD, "[]", "{}", policies, None)
    targets: list[Callable[[], object]] = [good(0), good(1), lambda: store.upsert_job(unencodable, T), good(2)]
    with patch.object(store, "_write", side_effect=write):
        leader, _ = _in_threads(targets[:1])
        leader[0].start()
        wait_until(lambda: len(calls) == 1, message="the leader is committing")
        group, results = _in_threads(targets[1:])
        for t in group:
            t.start()
        wait_until(lambda: len(store._group_queue) == 3, message="the group queued")
        release.set()
        for t in [*leader, *group]:
            t.join(TIMEOUT)
    assert isinstance(results[1], UnicodeEncodeError), results[1]
    assert [r[1] if isinstance(r, tuple) else r for r in (results[0], results[2])] == ["created", "created"]
    assert {j.job_id: j.state for j in store.list_jobs()} == {f"g{i}": JobState.SCHEDULED for i in range(3)}


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_bad_ids_among_many_concurrent_schedules_fail_alone(engine: str, tmp_path: Path) -> None:
    """Bad input is InvalidJobError before any write, and never fails the valid
    calls that would have shared its transaction (160 threads released together)."""
    valid, bad = 160, 20
    with contextlib.ExitStack() as stack:
        url = f"sqlite:///{tmp_path / 'many.db'}" if engine == "sqlite" else stack.enter_context(pg_schema("group"))
        sched = JobScheduler(url, clock=FakeClock(1_700_000_000.123457))
        stack.callback(sched.shutdown)
        sched.jobs()  # migrate first: the threads race the group commit, not the migration
        ids = [f"ok-{i}" for i in range(valid)] + [f"bad-{i}\udc80" for i in range(bad)]
        barrier = threading.Barrier(len(ids))

        def call(job_id: str) -> Callable[[], object]:
            def run() -> object:
                barrier.wait(TIMEOUT)
                return sched.schedule(job_id, race_jobs.RECORD, 10.0)

            return run

        threads, results = _in_threads([call(job_id) for job_id in ids])
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert not any(thread.is_alive() for thread in threads)
        failed = [(job_id, r) for job_id, r in zip(ids[:valid], results, strict=False) if not isinstance(r, Job)]
        assert failed == []
        refused = results[valid:]
        assert all(isinstance(r, InvalidJobError) and r.argument == "job_id" for r in refused), refused
        assert sorted(j.job_id for j in sched.jobs()) == sorted(ids[:valid])


@pytest.mark.stress
def test_many_threads_scheduling_and_descheduling_lose_no_update(store: Store) -> None:
    """Each thread owns its ids, so the final state of every id is known exactly."""
    per_thread = 40

    def churn(t: int) -> Callable[[], object]:
        def run() -> object:
            for i in range(per_thread):
                job_id = f"t{t}-{i % 5}"
                store.upsert_job(
                    validate_definition(job_id, race_jobs.RECORD, validate_policies(10.0 + i), (), {}, None), T
                )
                if i % 3 == 0:
                    store.deschedule_job(job_id, T)
            return None

        return run

    threads, results = _in_threads([churn(t) for t in range(8)])
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert results == [None] * 8
    jobs = {j.job_id: j for j in store.list_jobs()}
    for t in range(8):
        for k in range(5):
            ops = [i for i in range(per_thread) if i % 5 == k]
            last = ops[-1]
            job = jobs.get(f"t{t}-{k}")
            if last % 3 == 0:
                assert job is None
            else:
                assert job is not None
                assert job.interval_seconds == 10.0 + last
                # Every upsert of a changed definition is a new generation.
                assert job.generation == len(ops)
