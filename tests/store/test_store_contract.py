"""The store contract, over SQLite and PostgreSQL.

Every method gets `now` explicitly, so no clock and no scheduler is involved;
threads appear only where a `threading.Barrier` lines two transactions up
against each other. The linearization points under test are the commits of
`upsert_job`, `deschedule_job`, `claim_runs`, `finish_runs` and `recover_run`.

Tests marked ``broken-*`` run the same scenario against the store code with
one safeguard removed (`tests.support.race_jobs`: the real claim less one
clause of its predicate, or a hand copy of a completion); they are
``xfail(strict=True, raises=AssertionError)``: if one of them passes, the test
cannot tell the broken code from the real one, and if one crashes, it proves
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from persched import JobState
from persched._model.instant import Instant, Micros, from_datetime, micros, to_datetime
from persched._model.models import JobDefinition, validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Correction, OpenRun, Recovery, Store, mappers
from persched._store import db as _db
from persched._store.schema import jobs, runs
from tests.support import race_jobs
from tests.support.helpers import EPOCH, TIMEOUT
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from persched import Job

T = Instant(micros(EPOCH))
ME = "me:1:aaaaaa"
OTHER = "other:2:bbbbbb"
LEASE = Micros(30_000_000)


def at(offset: float) -> Instant:
    """The instant `offset` seconds after `T`."""
    return Instant(T + micros(offset))


def definition(
    job_id: str = "a",
    *,
    args: tuple[Any, ...] = ("a",),
    interval: float = 10.0,
    start_in: float | None = None,
    target: str = race_jobs.RECORD,
    **policies: Any,  # noqa: ANN401 - schedule()'s policy keywords
) -> JobDefinition:
    return validate_definition(job_id, target, validate_policies(interval, **policies), args, {}, start_in)


def schedule(store: Store, now: Instant = T, **kwargs: Any) -> Job:  # noqa: ANN401 - forwarded to definition()
    job, _, _ = store.upsert_job(definition(**kwargs), now)
    return job


def job_row(store: Store, job_id: str = "a") -> Job:
    """The job's row, whatever its state (get_job hides descheduled ones)."""
    for job in store.list_jobs():
        if job.job_id == job_id:
            return job
    raise AssertionError(f"{job_id} is not active")


def claim(
    store: Store, job: Job, now: Instant, *, expected_at: Instant | None = None, who: str = ME
) -> Claim | ClaimMiss:
    due = from_datetime(job.next_run_at) if expected_at is None else expected_at
    return claim_one(store, job.job_id, job.generation, due, now, who, LEASE)


def won(result: Claim | ClaimMiss) -> Claim:
    assert isinstance(result, Claim), result
    return result


def finish(store: Store, c: Claim, now: Instant, *, who: str = ME) -> bool:
    """Complete `c`; True if the job is to be queued again (its row was its own, or is scheduled)."""
    return finish_one(store, c, who, now, "ok", None) is not None


def open_run(store: Store, run_id: int) -> OpenRun:
    (found,) = [r for r in store.open_runs() if r.run_id == run_id]
    return found


# --- claim variants -----------------------------------------------------------------

ClaimImpl = Callable[..., Claim | ClaimMiss]


def real_claim(store: Store, *args: Any) -> Claim | ClaimMiss:  # noqa: ANN401 - claim_run's arguments
    return claim_one(store, *args)


def xfail_variant(name: str, impl: object, reason: str) -> Any:  # noqa: ANN401 - pytest's ParameterSet is private
    """A strict-xfail parameter that must fail on an assertion: a broken variant that crashes proves nothing."""
    return pytest.param(impl, id=name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))


NO_GENERATION = race_jobs.claim_without("generation")
NO_STATE = race_jobs.claim_without("state")
NO_SLOT = race_jobs.claim_without("slot")


# --- upsert ---------------------------------------------------------------------------


def test_upsert_creates_generation_one_on_a_fresh_grid(store: Store) -> None:
    job, change, _ = store.upsert_job(definition(interval=10.0), T)
    assert change == "created"
    assert job.generation == 1
    assert job.state is JobState.SCHEDULED
    assert job.next_run_at == to_datetime(at(10.0))
    assert job.created_at == to_datetime(T)
    assert store.get_job("a") == job


def test_upsert_start_in_zero_is_due_now(store: Store) -> None:
    job = schedule(store, start_in=0)
    assert job.next_run_at == to_datetime(T)


def test_upsert_unchanged_keeps_generation_and_next_run(store: Store) -> None:
    first = schedule(store)
    again, change, _ = store.upsert_job(definition(), at(7.5))
    assert change == "unchanged"
    assert again.generation == first.generation
    assert again.next_run_at == first.next_run_at
    assert job_row(store) == first  # not even updated_at moved


def test_unchanged_redeclaration_keeps_a_job_that_is_overdue(store: Store) -> None:
    # An application re-declaring at start-up after downtime.
    first = schedule(store)
    again, change, _ = store.upsert_job(definition(), at(3600))
    assert change == "unchanged"
    assert again.next_run_at == first.next_run_at == to_datetime(at(10))
    assert isinstance(claim(store, again, at(3600)), Claim)


@pytest.mark.parametrize(
    "changed",
    [
        {"args": ("b",)},
        {"interval": 11.0},
        {"target": "tests.support.jobs:capture_run", "args": ("a",)},
    ],
    ids=["args", "interval", "target"],
)
def test_upsert_replace_bumps_generation_and_resets_the_grid(store: Store, changed: dict[str, Any]) -> None:
    schedule(store)
    job, change, _ = store.upsert_job(definition(**changed), at(4.0))
    assert change == "replaced"
    assert job.generation == 2
    interval = changed.get("interval", 10.0)
    assert job.next_run_at == to_datetime(at(4.0 + interval))
    assert job.state is JobState.SCHEDULED


def test_replace_of_a_running_job_frees_the_row_for_the_new_generation(store: Store) -> None:
    job = schedule(store)
    won(claim(store, job, at(10)))
    new, change, _ = store.upsert_job(definition(args=("b",)), at(11))
    assert change == "replaced"
    assert (new.generation, new.state, new.owner) == (2, JobState.SCHEDULED, None)
    assert new.next_run_at == to_datetime(at(21))


def test_deschedule_then_schedule_gives_a_higher_generation(store: Store) -> None:
    schedule(store)
    assert store.deschedule_job("a", at(1)) is not None
    assert store.get_job("a") is None
    assert store.list_jobs() == []
    assert store.deschedule_job("a", at(2)) is None  # already gone
    job, change, _ = store.upsert_job(definition(), at(3))  # the very same definition
    assert change == "created"
    assert job.generation == 2  # never reused (no ABA)
    assert job.next_run_at == to_datetime(at(13))
    store.deschedule_job("a", at(4))
    assert schedule(store, at(5)).generation == 3


def test_deschedule_unknown_job(store: Store) -> None:
    assert store.deschedule_job("nope", T) is None


def loaded(store: Store, now: Instant) -> tuple[list[tuple[Instant, str, int]], list[Correction]]:
    """What start-up reads (`persched._engine.horizon`): every due entry (one unbounded refill), the sweep's
    corrections."""
    entries, _ = store.load_due(None, Instant(now + micros(10 * 365 * 86_400)), 10_000)
    _, corrections, _ = store.sweep(None, 10_000, now)
    return entries, corrections


def test_start_up_lists_only_scheduled_rows(store: Store) -> None:
    a = schedule(store, job_id="a")
    schedule(store, job_id="b")
    c = schedule(store, job_id="c", start_in=0)
    store.deschedule_job("b", T)
    won(claim(store, c, T))
    assert loaded(store, T) == ([(at(10), "a", a.generation)], [])


# --- claim ---------------------------------------------------------------------------


def test_claim_moves_the_row_to_running_and_inserts_the_run(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    assert (c.job_id, c.generation, c.scheduled_for, c.started_at) == ("a", 1, at(10), at(10))
    assert (c.target, c.args_json, c.run_now) == (race_jobs.RECORD, '["a"]', False)
    row = job_row(store)
    assert (row.state, row.owner, row.lease_until) == (JobState.RUNNING, ME, to_datetime(at(10) + LEASE))
    (run,) = store.list_runs("a")
    assert (run.run_id, run.outcome, run.instance_id) == (c.run_id, None, ME)
    assert run.scheduled_for == to_datetime(at(10))


def _race(n: int, fn: Callable[[], Any]) -> tuple[list[Any], list[BaseException]]:
    """Run `fn` on `n` threads released together by a Barrier; collect results and errors."""
    barrier = threading.Barrier(n, timeout=TIMEOUT)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def go() -> None:
        try:
            barrier.wait()
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            with lock:
                errors.append(exc)
        else:
            with lock:
                results.append(result)

    threads = [threading.Thread(target=go, name=f"race-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    return results, errors


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(real_claim, id="real"),
        xfail_variant("broken-no-state-predicate", NO_STATE, "a claim without state='scheduled' takes a running row"),
    ],
)
def test_claim_wins_once(store: Store, impl: ClaimImpl) -> None:
    """Exactly one claim per slot: two instances, one slot, one winner."""
    for k in range(6):
        # A fixed-delay job keeps its slot while it runs: only the state predicate stops a second claim.
        job = schedule(store, job_id=f"j{k}", start_in=0, recurrence=("fixed_rate", "fixed_delay")[k % 2])
        results, errors = _race(
            2,
            lambda job=job, k=k: impl(  # type: ignore[misc]  # bound per iteration on purpose
                store, job.job_id, job.generation, T, at(0.5), f"inst-{k}-{threading.get_ident()}", LEASE
            ),
        )
        assert errors == []
        assert sorted(type(r).__name__ for r in results) == ["Claim", "ClaimMiss"]
        # A third instance comes after the winner's commit, as the loser always does on SQLite
        # (on PostgreSQL a loser during it skips the locked row): it misses as well, and the
        # row stays the winner's, in flight. (The one-run-per-slot index alone would keep a
        # second run of the slot from starting, not the row from being taken and moved on.)
        assert isinstance(impl(store, job.job_id, job.generation, T, at(0.5), f"inst-{k}-late", LEASE), ClaimMiss)
        row, winner = job_row(store, job.job_id), store.list_runs(job.job_id)[-1].instance_id
        assert (row.state, row.owner) == (JobState.RUNNING, winner), "a later claim took the winner's row"
        (miss,) = [r for r in results if isinstance(r, ClaimMiss)]
        # On PostgreSQL and MariaDB the loser skips the locked row (SKIP LOCKED)
        # and may read it before the winner commits; on SQLite it waits its turn.
        assert miss.state in (("running", "scheduled") if store.engine.dialect.name != "sqlite" else ("running",))
        assert len(store.list_runs(job.job_id)) == 1


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(real_claim, id="real"),
        xfail_variant("broken-no-generation-predicate", NO_GENERATION, "a stale heap entry claims a new definition"),
    ],
)
def test_claim_with_a_stale_generation_misses(store: Store, impl: ClaimImpl) -> None:
    old = schedule(store)
    # The replacement is due at once, so only the generation predicate stands
    # between the old heap entry (due at(10)) and the new definition.
    new, _, _ = store.upsert_job(definition(args=("b",), start_in=0), at(10))
    result = impl(store, "a", old.generation, at(10), at(10), ME, LEASE)
    assert isinstance(result, ClaimMiss)
    assert (result.state, result.generation) == ("scheduled", 2)
    assert job_row(store) == new
    assert store.list_runs("a") == []


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(real_claim, id="real"),
        xfail_variant("broken-no-state-predicate", NO_STATE, "a descheduled job is claimed"),
    ],
)
def test_claim_after_deschedule_misses(store: Store, impl: ClaimImpl) -> None:
    job = schedule(store)
    store.deschedule_job("a", at(9))
    result = impl(store, "a", job.generation, at(10), at(10), ME, LEASE)
    assert isinstance(result, ClaimMiss)
    assert result.state == "descheduled"
    assert store.list_runs("a") == []
    assert store.get_job("a") is None


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(real_claim, id="real"),
        xfail_variant("broken-no-slot-predicate", NO_SLOT, "an entry runs a slot early"),
    ],
)
def test_claim_before_the_slot_misses(store: Store, impl: ClaimImpl) -> None:
    """An entry due at T+10 must not claim a row another instance moved on to T+20."""
    job = schedule(store)
    c = won(claim(store, job, at(10), who=OTHER))
    assert finish(store, c, at(11), who=OTHER)  # row now at at(20)
    result = impl(store, "a", job.generation, at(10), at(12), ME, LEASE)
    assert isinstance(result, ClaimMiss)
    assert (result.state, result.due_at) == ("scheduled", at(20))
    assert len(store.list_runs("a")) == 1


def test_claim_while_running_misses_and_names_the_owner(store: Store) -> None:
    job = schedule(store)
    won(claim(store, job, at(10), who=OTHER))
    miss = claim(store, job, at(10))
    assert isinstance(miss, ClaimMiss)
    # due_at: look again at the next slot, in case the owner dies.
    assert (miss.state, miss.generation, miss.owner, miss.due_at) == ("running", 1, OTHER, at(20))


def test_claim_while_a_run_outlasts_its_next_slot_looks_again_a_slot_later(store: Store) -> None:
    """The owner's overrun makes the next slot due; a loser must not retry it at once.

    Before, its due_at was that slot, already past: the loser's dispatcher
    tried again at once, in a loop, taking SQLite's write lock each time,
    until the owner's completion committed.
    """
    job = schedule(store)
    won(claim(store, job, at(10), who=OTHER))  # runs for at(10); its next slot is at(20)
    miss = claim(store, job, at(25), expected_at=at(20))
    assert isinstance(miss, ClaimMiss)
    assert (miss.state, miss.owner) == ("running", OTHER)
    assert miss.due_at == at(30)  # one slot later: at(20) is the owner's, queued by its completion
    again = claim(store, job, at(30), expected_at=at(30))
    assert isinstance(again, ClaimMiss)
    assert again.due_at == at(40)


def test_claim_of_an_unknown_job_misses(store: Store) -> None:
    assert claim_one(store, "nope", 1, T, T, ME, LEASE) == ClaimMiss(None)


def test_a_late_claim_coalesces_to_the_latest_slot(store: Store) -> None:
    job = schedule(store)  # slots T+10, T+20, ...
    c = won(claim(store, job, at(45.5)))
    assert c.scheduled_for == at(40)  # the most recent slot it stands for
    assert c.started_at == at(45.5)
    assert job_row(store).next_run_at == to_datetime(at(50))  # the next slot still to run
    assert finish(store, c, at(46))
    row = job_row(store)
    assert (row.state, row.next_run_at, row.run_count, row.last_outcome) == (
        JobState.SCHEDULED,
        to_datetime(at(50)),
        1,
        "ok",
    )
    (run,) = store.list_runs("a")
    assert run.scheduled_for == to_datetime(at(40))
    assert (run.outcome, run.finished_at) == ("ok", to_datetime(at(46)))


def test_a_claim_after_a_ten_year_gap_coalesces_into_one_run(store: Store) -> None:
    job = schedule(store, interval=0.001)
    later = at(10 * 365 * 86400 + 0.0005)
    c = won(claim(store, job, later))
    assert later - 1000 < c.scheduled_for <= later
    assert len(store.list_runs("a")) == 1


def test_a_slot_is_never_claimed_twice(store: Store) -> None:
    """A row put back on a slot that ran (a hand edit, a clock behind) is settled alone:
    no second run of the slot, the row moves past it (one job never holds back another)."""
    job = schedule(store)
    other = schedule(store, job_id="b")
    c = won(claim(store, job, at(10)))
    assert finish(store, c, at(11))
    with store.engine.begin() as conn:  # the bug: next_run_at back on the slot that ran
        conn.execute(update(jobs).where(jobs.c.job_id == "a").values(next_run_at=to_datetime(at(10))))
    results = store.claim_runs(
        [("a", job.generation, at(10), at(10)), ("b", other.generation, at(10), at(10))], at(10), ME, LEASE
    )
    assert results[0] == ClaimMiss("scheduled", job.generation, None, at(20))
    assert isinstance(results[1], Claim)  # the other job of the batch is claimed in the same cycle
    assert [r.scheduled_for for r in store.list_runs("a")] == [to_datetime(at(10))]
    row = job_row(store)
    assert (row.state, row.next_run_at, row.owner) == (JobState.SCHEDULED, to_datetime(at(20)), None)


def test_the_schema_refuses_a_second_run_of_a_slot(store: Store) -> None:
    job = schedule(store)
    won(claim(store, job, at(10)))
    row = {"job_id": "a", "generation": job.generation, "scheduled_for": to_datetime(at(10))}
    extra = {"started_at": to_datetime(at(10)), "instance_id": ME, "run_now": False}
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(runs.insert().values(**row, **extra))


def test_unique_job_generation_scheduled_for(store: Store) -> None:
    job = schedule(store)
    won(claim(store, job, at(10)))
    row = {
        "job_id": "a",
        "generation": 1,
        "scheduled_for": to_datetime(at(10)),
        "started_at": to_datetime(at(10)),
        "instance_id": OTHER,
    }
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(runs.insert().values(**row))
    with store.engine.begin() as conn:  # another generation, or a run-now run, may use the same instant
        conn.execute(runs.insert().values(**{**row, "generation": 2}))
        conn.execute(runs.insert().values(**{**row, "run_now": True}))
        count = len(conn.execute(select(runs.c.run_id).where(runs.c.job_id == "a")).all())
    assert count == 3


# --- finish ---------------------------------------------------------------------------


def test_finish_moves_the_job_on(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    assert finish_one(store, c, ME, at(12), "error", "boom") == at(20)  # due again at the next slot
    row = job_row(store)
    assert (row.state, row.next_run_at, row.owner, row.lease_until) == (
        JobState.SCHEDULED,
        to_datetime(at(20)),
        None,
        None,
    )
    assert (row.run_count, row.error_count, row.last_outcome) == (1, 1, "error")
    (run,) = store.list_runs("a")
    assert (run.outcome, run.error) == ("error", "boom")


FINISH_VARIANTS = [
    pytest.param(finish_one, id="real"),
    xfail_variant(
        "broken-finish-by-job-id", race_jobs.finish_by_job_id_only, "a stale completion moves the new definition"
    ),
]


@pytest.mark.parametrize("finish_impl", FINISH_VARIANTS)
def test_finish_of_an_old_generation_after_replace(store: Store, finish_impl: Callable[..., float | None]) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    new, _, _ = store.upsert_job(definition(args=("b",), interval=7.0), at(11))
    assert finish_impl(store, c, ME, at(12), "ok", None) is None
    assert job_row(store) == new  # untouched: generation, next_run_at, counters, state
    (run,) = store.list_runs("a")
    assert (run.generation, run.outcome) == (1, "ok")  # the old run's history is kept


@pytest.mark.parametrize("finish_impl", FINISH_VARIANTS)
def test_finish_of_an_old_generation_after_deschedule_and_reschedule(
    store: Store, finish_impl: Callable[..., float | None]
) -> None:
    """The same definition again: only the generation tells the two apart."""
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    store.deschedule_job("a", at(11))
    new, change, _ = store.upsert_job(definition(start_in=3.0), at(11))
    assert (change, new.generation) == ("created", 2)
    assert finish_impl(store, c, ME, at(12), "ok", None) is None
    assert job_row(store) == new


def test_finish_after_deschedule_keeps_the_job_descheduled(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    store.deschedule_job("a", at(11))
    assert finish(store, c, at(12)) is False
    assert store.get_job("a") is None
    assert loaded(store, at(11)) == ([], [])
    (run,) = store.list_runs("a")
    assert run.outcome == "ok"


def test_finish_by_another_instance_changes_no_job(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    assert finish(store, c, at(12), who=OTHER) is False
    assert job_row(store).state is JobState.RUNNING


# --- leases and recovery -----------------------------------------------------------------


def test_renew_leases_moves_run_and_job_leases(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    store.renew_leases(ME, at(100), [c.run_id])
    assert open_run(store, c.run_id).lease_until == to_datetime(at(100))
    assert job_row(store).lease_until == to_datetime(at(100))
    store.renew_leases(OTHER, at(200), [c.run_id])  # someone else's renewal touches nothing of ours
    assert open_run(store, c.run_id).lease_until == to_datetime(at(100))


def test_renew_leases_leaves_runs_not_in_flight_to_lapse(store: Store) -> None:
    """An open run of this instance that no worker holds (a claim whose commit
    reply was lost, or a run of an earlier process with the same instance id)
    is not renewed, so it can be recovered."""
    in_flight = won(claim(store, schedule(store, job_id="a"), at(10)))
    orphan = won(claim(store, schedule(store, job_id="b"), at(10)))
    store.renew_leases(ME, at(100), [in_flight.run_id])
    assert open_run(store, in_flight.run_id).lease_until == to_datetime(at(100))
    assert open_run(store, orphan.run_id).lease_until == to_datetime(at(10) + LEASE)
    assert job_row(store, "b").lease_until == to_datetime(at(10) + LEASE)
    assert store.recover_run(open_run(store, orphan.run_id), at(200)) == Recovery(lost=True, due=at(20))


def test_recover_marks_the_run_lost_and_skips_its_slot(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10), who=OTHER))
    assert store.recover_run(open_run(store, c.run_id), at(50)) == Recovery(lost=True, due=at(20))
    row = job_row(store)
    assert (row.state, row.next_run_at, row.owner, row.last_outcome) == (
        JobState.SCHEDULED,
        to_datetime(at(20)),
        None,
        "lost",
    )
    (run,) = store.list_runs("a")
    assert (run.outcome, run.finished_at) == ("lost", to_datetime(at(50)))
    assert store.open_runs() == []
    # The lost slot is not run again.
    assert isinstance(claim(store, job, at(50), expected_at=at(10)), ClaimMiss)
    again = won(claim(store, job, at(50), expected_at=at(20)))
    assert again.scheduled_for == at(50)


def test_finish_after_recover_is_rejected(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    store.recover_run(open_run(store, c.run_id), at(50))
    before = job_row(store)
    # Not its row any more: nothing is written, the job is only queued where it stands.
    assert finish_one(store, c, ME, at(51), "ok", None) == at(20)
    assert job_row(store) == before
    (run,) = store.list_runs("a")
    assert run.outcome == "lost"  # the late completion does not overwrite it


def test_recover_with_a_renewed_lease_changes_nothing(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    observed = open_run(store, c.run_id)
    store.renew_leases(ME, at(70), [c.run_id])  # the owner is alive
    assert store.recover_run(observed, at(50)) == Recovery(lost=False)
    assert job_row(store).state is JobState.RUNNING
    assert open_run(store, c.run_id).lease_until == to_datetime(at(70))
    assert finish(store, c, at(80)) is True


def test_recover_after_finish_changes_nothing(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    observed = open_run(store, c.run_id)
    assert finish(store, c, at(11))
    assert store.recover_run(observed, at(50)) == Recovery(lost=False)
    (run,) = store.list_runs("a")
    assert run.outcome == "ok"


def test_recover_of_a_replaced_job_only_closes_the_run(store: Store) -> None:
    job = schedule(store)
    c = won(claim(store, job, at(10)))
    new, _, _ = store.upsert_job(definition(args=("b",)), at(11))
    assert store.recover_run(open_run(store, c.run_id), at(50)) == Recovery(lost=True)
    assert job_row(store) == new
    assert store.list_runs("a")[0].outcome == "lost"


def test_recover_races_finish_exactly_one_wins(store: Store) -> None:
    """A completion and a recovery of one run, lined up by a Barrier: one outcome."""
    for k in range(5):
        job = schedule(store, job_id=f"j{k}")
        c = won(claim(store, job, at(10)))
        observed = open_run(store, c.run_id)
        barrier = threading.Barrier(2, timeout=TIMEOUT)
        out: dict[str, Any] = {}

        def do_finish(c: Claim = c, barrier: threading.Barrier = barrier, out: dict[str, Any] = out) -> None:
            barrier.wait()
            out["finish"] = finish(store, c, at(50))

        def do_recover(
            observed: OpenRun = observed, barrier: threading.Barrier = barrier, out: dict[str, Any] = out
        ) -> None:
            barrier.wait()
            out["recover"] = store.recover_run(observed, at(50))

        threads = [threading.Thread(target=do_finish), threading.Thread(target=do_recover)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        assert set(out) == {"finish", "recover"}
        (run,) = store.list_runs(job.job_id)
        row = job_row(store, job.job_id)
        assert row.state is JobState.SCHEDULED
        assert row.run_count == 1  # counted once, by whichever won
        assert out["finish"]  # either way the job is queued at its next slot
        if run.outcome == "ok":
            assert out["recover"] == Recovery(lost=False)
        else:
            assert (out["recover"], run.outcome) == (Recovery(lost=True, due=at(20)), "lost")


def test_a_deschedule_committed_during_a_recovery_wins(store: Store) -> None:
    """A deschedule that commits between the recovery's read of the job row
    and its write must not be undone (found on PostgreSQL, where that read
    takes no lock): the run is recorded lost, the job stays descheduled."""
    if store.engine.dialect.name == "sqlite":
        pytest.skip("SQLite serializes write transactions: this interleaving cannot happen there")
    job = schedule(store)
    c = won(claim(store, job, at(10), who=OTHER))
    other = Store(_db.make_engine(store.engine.url.render_as_string(hide_password=False)), store.url)
    descheduled: list[int | None] = []
    real_plan = mappers.plan_of

    def deschedule_meanwhile(*args: Any) -> Any:  # noqa: ANN401 - _plan's row and plan
        # Called inside recover_run's transaction, between its read and its write.
        t = threading.Thread(target=lambda: descheduled.append(other.deschedule_job("a", at(40))))
        t.start()
        t.join(TIMEOUT)
        return real_plan(*args)

    try:
        with patch.object(mappers, "plan_of", side_effect=deschedule_meanwhile):
            result = store.recover_run(open_run(store, c.run_id), at(50))
    finally:
        other.engine.dispose()
    assert descheduled == [c.generation]
    assert result == Recovery(lost=True)  # nothing to queue: the job is gone
    assert store.get_job("a") is None
    assert [e for e in loaded(store, at(50))[0] if e[1] == "a"] == []
    (run,) = store.list_runs("a")
    assert run.outcome == "lost"


def test_a_claim_at_exactly_the_slot_of_a_grid_made_at_an_odd_instant_wins(store: Store) -> None:
    """Instants are whole microseconds everywhere: the slot stored is the slot
    computed, so a claim at that very instant is due (no rounding gap either way)."""
    now = at(0.123457)
    job = schedule(store, now, start_in=0)
    assert from_datetime(job.next_run_at) == now
    assert isinstance(claim_one(store, "a", job.generation, now, now, ME, LEASE), Claim)
