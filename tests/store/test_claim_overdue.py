"""The claim by query: `Store.claim_overdue` and `ClaimMiss.taken`, on every engine.

An instance hands `claim_overdue` a number of free workers and a bound; the
database hands back up to that many waiting rows due before the bound,
oldest first, whichever instance's heap holds them. Two instances asking at
once get disjoint rows: PostgreSQL and MariaDB pass by the rows another
transaction locked (SKIP LOCKED, shown here with a lock held on purpose),
SQLite serialises the two searches. Every `now` is explicit and odd
(`T`), as in the store contract suite.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select, update

from persched._model.instant import Instant, Micros, micros
from persched._model.models import validate_definition, validate_policies
from persched._model.triggers import jitter_offset
from persched._store import Claim, ClaimMiss, Store
from persched._store.schema import jobs
from tests.support import race_jobs
from tests.support.helpers import TIMEOUT
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from persched import Job

T = Instant(micros(1_700_000_123.4567))
ME = "me:1:aaaaaa"
OTHER = "other:2:bbbbbb"
LEASE = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def schedule(store: Store, job_id: str, start_in: float, **policies: Any) -> Job:  # noqa: ANN401 - policy keywords
    definition = validate_definition(
        job_id, race_jobs.RECORD, validate_policies(10.0, **policies), (job_id,), {}, start_in
    )
    job, _, _ = store.upsert_job(definition, T)
    return job


def overdue(
    store: Store,
    limit: int,
    before: Instant,
    now: Instant,
    who: str = ME,
    passed_by: list[tuple[str, int]] | None = None,
) -> list[str]:
    """The jobs `who` claimed by query, in the order claimed (every result a Claim)."""
    entries, results, later, unreadable = store.claim_overdue(limit, before, now, who, LEASE, passed_by or ())
    assert later == []
    assert unreadable == []
    assert all(isinstance(r, Claim) for r in results), results
    return [job_id for job_id, _, _, _ in entries]


def test_claims_the_oldest_overdue_rows_first(store: Store) -> None:
    for i, start_in in enumerate((5, 1, 4, 2, 3, 30)):
        schedule(store, f"j{i}", start_in)
    assert overdue(store, 3, at(20), at(20)) == ["j1", "j3", "j4"]  # the three oldest slots
    assert overdue(store, 8, at(20), at(20)) == ["j2", "j0"]  # the rest due before the bound; j5 is not
    running = {job.job_id for job in store.list_jobs() if job.state.value == "running"}
    assert running == {f"j{i}" for i in range(5)}


def test_nothing_overdue_claims_nothing(store: Store) -> None:
    schedule(store, "a", 10)
    assert store.claim_overdue(8, at(10), at(10), ME, LEASE) == ([], [], [], [])  # before is exclusive


def test_paused_and_running_rows_are_not_claimed(store: Store) -> None:
    schedule(store, "paused", 1)
    store.pause_job("paused", T)
    busy = schedule(store, "busy", 1)
    assert isinstance(claim_one(store, "busy", busy.generation, at(1), at(1), OTHER, LEASE), Claim)
    schedule(store, "free", 2)
    assert overdue(store, 8, at(5), at(5)) == ["free"]


def test_two_instances_asking_at_once_take_disjoint_rows(store: Store) -> None:
    for i in range(8):
        schedule(store, f"j{i}", 1 + i)
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    taken: dict[str, list[str]] = {}

    def ask(who: str) -> None:
        barrier.wait()
        taken[who] = overdue(store, 3, at(20), at(20), who)

    threads = [threading.Thread(target=ask, args=(who,)) for who in (ME, OTHER)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not set(taken[ME]) & set(taken[OTHER])
    assert sorted(taken[ME] + taken[OTHER]) == [f"j{i}" for i in range(6)]  # the six oldest, each once


def test_rows_another_claim_holds_are_passed_by_not_waited_for(store: Store) -> None:
    """One instance is saturated or slow in its claim: the other's search takes the next-oldest rows at once."""
    if store.dialect.name == "sqlite":
        return  # one writer at a time: the search cannot run while another claim holds the lock
    for i in range(5):
        schedule(store, f"j{i}", 1 + i)
    found: list[str] = []
    with store.engine.connect() as conn, conn.begin():
        # Another instance's claim in progress: it holds the two oldest rows.
        for job_id in ("j0", "j1"):  # by key, one at a time: MariaDB locks every row a scan of 5 rows reads
            conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id).with_for_update()).all()
        search = threading.Thread(target=lambda: found.extend(overdue(store, 2, at(20), at(20))))
        search.start()
        search.join(TIMEOUT)
        assert not search.is_alive(), "the search waited for the other claim's locks"
    assert found == ["j2", "j3"]


def test_a_row_whose_jitter_has_not_run_out_goes_to_the_heap(store: Store) -> None:
    job = schedule(store, "a", 1, jitter_seconds=5.0)
    slot = at(1)
    due = Instant(slot + jitter_offset("a", job.generation, slot, Micros(5_000_000)))
    before_due = Instant(due - 1)
    assert store.claim_overdue(8, before_due, before_due, ME, LEASE) == ([], [], [(due, "a", job.generation)], [])
    assert overdue(store, 8, due, due) == ["a"]


def test_a_claim_lost_to_another_instance_says_the_slot_is_taken(store: Store) -> None:
    job = schedule(store, "a", 10)
    c = claim_one(store, "a", job.generation, at(10), at(10), OTHER, LEASE)
    assert isinstance(c, Claim)
    running = claim_one(store, "a", job.generation, at(10), at(10.1), ME, LEASE)
    assert isinstance(running, ClaimMiss)
    assert running.taken
    assert finish_one(store, c, OTHER, at(10.2), "ok", None) is not None
    moved_on = claim_one(store, "a", job.generation, at(10), at(10.3), ME, LEASE)
    assert isinstance(moved_on, ClaimMiss)
    assert moved_on.taken


def test_a_due_row_passed_by_is_looked_at_again_in_a_moment_not_a_slot_later(store: Store) -> None:
    """A transaction that only locks the row (an unchanged schedule(), declare() at start-up:
    ``SELECT … FOR UPDATE``, no write) makes the claim pass it by. Not taken, and looked at again
    a moment later, when the slot still runs; it used to be a slot later: that slot was lost."""
    if store.dialect.name == "sqlite":
        pytest.skip("a claim waits for SQLite's write lock: nothing is passed by")
    job = schedule(store, "a", 0)  # every 10 s, due at T
    with store.engine.connect() as conn, conn.begin():
        conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == "a").with_for_update()).all()
        miss = claim_one(store, "a", job.generation, T, at(0.001), ME, LEASE)
    assert isinstance(miss, ClaimMiss), miss
    assert not miss.taken
    assert miss.due_at is not None
    assert at(0.001) < miss.due_at <= at(0.1)
    claim = claim_one(store, "a", job.generation, miss.due_at, miss.due_at, ME, LEASE)
    assert isinstance(claim, Claim), claim
    assert claim.scheduled_for == T


def test_a_claim_lost_to_a_pause_or_a_run_now_request_is_not_taken(store: Store) -> None:
    job = schedule(store, "a", 10)
    store.request_run_now("a", at(3))
    pending = claim_one(store, "a", job.generation, at(2), at(2), ME, LEASE)  # before both: misses
    assert isinstance(pending, ClaimMiss)
    assert not pending.taken
    assert pending.due_at == at(3)
    store.pause_job("a", at(4))
    paused = claim_one(store, "a", job.generation, at(10), at(10), ME, LEASE)
    assert isinstance(paused, ClaimMiss)
    assert not paused.taken


def test_an_unreadable_row_is_named_and_then_passed_by_until_it_is_fixed(store: Store) -> None:
    bad = schedule(store, "bad", 1)
    schedule(store, "good", 2)
    with store.engine.begin() as conn:  # a hand edit that no reader can parse
        conn.execute(update(jobs).where(jobs.c.job_id == "bad").values(interval_seconds=-1.0))
    found = store.claim_overdue(1, at(5), at(5), ME, LEASE)
    assert (found.entries, found.unreadable) == ([], [("bad", bad.generation)])
    assert overdue(store, 1, at(5), at(5), passed_by=found.unreadable) == ["good"]
    # The documented fix, schedule() with a valid definition, is a new generation: found again.
    fixed = schedule(store, "bad", 0)  # its first slot due at once
    assert fixed.generation == bad.generation + 1
    assert overdue(store, 1, at(6), at(6), passed_by=found.unreadable) == ["bad"]
