"""Stranded rows: a job row that no scheduler would ever move on, found and freed.

See docs/reference/behaviour.md#stranded-rows.

A row is stranded when it says ``running`` while no run of its job is open
(its owner rewritten by hand, or an owner that never existed, with a lease
far ahead), or when its state is not a job state at all. `stranded_jobs`
lists them; `free_stranded_job` puts a ``running`` one back on its grid and
parks one with an unknown state (paused), each with an "error" record saying
why, only if the row is still exactly as it was seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sqlalchemy import update

from persched import JobState
from persched._model.instant import Instant, Micros, micros, to_datetime
from persched._store import Claim, Stranded
from persched._store.schema import jobs
from tests.support.store_calls import claim_one, claim_won, finish_one, schedule_each

if TYPE_CHECKING:
    from typing import Any

    from persched._store import Store

T: Final = Instant(micros(1_700_000_000.25))
ME: Final = "me:1:aaaaaa"
LEASE: Final = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def schedule(store: Store, *job_ids: str) -> None:
    schedule_each(store, job_ids, T)


def edit(store: Store, job_id: str, **values: Any) -> None:  # noqa: ANN401 - column values
    with store.engine.begin() as conn:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(**values))


def claimed(store: Store, job_id: str) -> Claim:
    return claim_won(store, job_id, at(10), ME, LEASE)


def test_a_running_job_with_its_run_open_is_not_stranded(store: Store) -> None:
    schedule(store, "a", "b")
    claimed(store, "a")
    assert store.stranded_jobs() == []


def test_a_run_whose_owner_was_rewritten_strands_its_job_and_is_freed_onto_its_grid(store: Store) -> None:
    schedule(store, "a", "b")
    run = claimed(store, "a")
    edit(store, "a", owner="someone:else:000000")
    assert finish_one(store, run, ME, at(11), "ok", None) is None  # not its row any more: the run closes
    (stranded,) = store.stranded_jobs()
    assert stranded == Stranded(
        "a", 1, "running", "someone:else:000000", to_datetime(at(10) + LEASE), to_datetime(at(10))
    )
    assert store.free_stranded_job(stranded, at(12), ME) == at(20)
    job = store.get_job("a")
    assert job is not None
    assert (job.state, job.owner, job.lease_until, job.next_run_at) == (
        JobState.SCHEDULED,
        None,
        None,
        to_datetime(at(20)),
    )
    (note,) = [r for r in store.list_runs("a") if r.run_now]
    assert note.outcome == "error"
    assert note.error is not None
    assert "someone:else:000000" in note.error
    assert "no run of it was open" in note.error
    assert store.stranded_jobs() == []
    again = claim_one(store, "a", 1, at(20), at(20), ME, LEASE)
    assert isinstance(again, Claim)
    assert again.scheduled_for == at(20)


def test_an_unknown_owner_with_a_far_lease_is_freed_too(store: Store) -> None:
    schedule(store, "a")
    far = to_datetime(at(10**8))
    edit(store, "a", state="running", owner="ghost", lease_until=far, running_for=to_datetime(at(10)))
    (stranded,) = store.stranded_jobs()
    assert (stranded.owner, stranded.lease_until) == ("ghost", far)
    assert store.free_stranded_job(stranded, at(12), ME) == at(20)
    job = store.get_job("a")
    assert job is not None
    assert job.state is JobState.SCHEDULED


def test_an_unknown_state_is_parked_with_its_reason(store: Store) -> None:
    schedule(store, "a", "b")
    edit(store, "a", state="bogus")
    (stranded,) = store.stranded_jobs()
    assert (stranded.job_id, stranded.state) == ("a", "bogus")
    assert store.free_stranded_job(stranded, at(12), ME) is None
    job = store.get_job("a")
    assert job is not None
    assert (job.state, job.unreadable) == (JobState.PAUSED, None)
    (note,) = store.list_runs("a")
    assert note.outcome == "error"
    assert note.error is not None
    assert "'bogus' is not a job state" in note.error
    assert "paused" in note.error
    assert store.resume_job("a", at(13)) == (1, at(20))


def test_a_stranded_row_that_changed_since_it_was_seen_is_left_alone(store: Store) -> None:
    schedule(store, "a")
    edit(store, "a", state="running", owner="ghost", lease_until=to_datetime(at(99)), running_for=to_datetime(at(10)))
    (stranded,) = store.stranded_jobs()
    edit(store, "a", lease_until=to_datetime(at(100)))  # its owner renewed it after all
    assert store.free_stranded_job(stranded, at(12), ME) is None
    job = store.get_job("a")
    assert job is not None
    assert (job.state, job.owner) == (JobState.RUNNING, "ghost")
    assert store.list_runs("a") == []
