"""Deterministic races between the scheduler's linearization points.

Time comes only from `FakeClock`; interleavings are forced with seams
(`tests.support.race_jobs.Seam`) that hold a store call before or after its
commit until the test lets it go, so "deschedule commits while the claim is
inside the store" is not a matter of luck. Every wait is bounded by TIMEOUT.

Each race also runs against a deliberately broken variant of the code under
test (id ``broken-*``, ``xfail(strict=True)``), so that a test that cannot fail
would show up as XPASS.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched._engine.membership import owner_among
from persched._engine.runs import Dispatched
from persched._model.instant import Instant, Micros
from persched._store import Claim, ClaimMiss, Store
from tests.support import jobs, race_jobs
from tests.support.helpers import TIMEOUT, at, at_us, finished_runs, heartbeat_settled, sql, wait_until
from tests.support.race_jobs import Seam, batch_claims, batch_finishes, for_job, real_claim_run, real_finish_run
from tests.support.seams import patch_store, store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Sequence

    from persched import JobScheduler
    from persched._engine.runs import HandOver
    from persched._store import ClaimEntry, Completion
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

ClaimImpl = Callable[..., "Claim | ClaimMiss"]


def broken(name: str, value: object, reason: str) -> Any:  # noqa: ANN401 - pytest's ParameterSet is private
    """A strict-xfail parameter that must fail on an assertion: a broken variant that crashes proves nothing."""
    return pytest.param(value, id=name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))


def claim_seam(seams: list[Seam], sched: JobScheduler, job_id: str, impl: ClaimImpl | None = None, **kw: bool) -> Seam:
    """A seam around `sched`'s claim of `job_id` (optionally a broken claim)."""
    store = store_of(sched)
    real = real_claim_run(store) if impl is None else functools.partial(impl, store)
    seam = Seam(real, match=for_job(job_id), **kw)
    seams.append(seam)
    return seam


def finish_seam(
    seams: list[Seam], sched: JobScheduler, job_id: str, impl: Callable[..., Instant | None] | None = None, **kw: bool
) -> Seam:
    """A seam around `sched`'s completion of `job_id` (optionally a broken one)."""
    store = store_of(sched)
    real = real_finish_run(store) if impl is None else functools.partial(impl, store)
    seam = Seam(real, match=for_job(job_id), **kw)
    seams.append(seam)
    return seam


def db(sched: JobScheduler, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """Read the scheduler's SQLite file directly (works after shutdown too)."""
    return sql(str(store_of(sched).engine.url), statement, params)


def run_rows(sched: JobScheduler, job_id: str) -> list[tuple[Any, ...]]:
    """``(generation, outcome)`` of every run of `job_id`, oldest first."""
    return db(sched, "SELECT generation, outcome FROM persched_runs WHERE job_id = ? ORDER BY run_id", job_id)


def job_state(sched: JobScheduler, job_id: str) -> str:
    ((state,),) = db(sched, "SELECT state FROM persched_jobs WHERE job_id = ?", job_id)
    assert isinstance(state, str)
    return state


def quiet_heartbeat(sched: JobScheduler) -> None:
    """Stop the heartbeat thread; the test runs its lease rounds itself (``sched._heartbeat.leases.round()``)."""
    sched._heartbeat.stop()
    sched._heartbeat.join(TIMEOUT)


def probe(sched: JobScheduler, clock: FakeClock, after: float) -> None:
    """Advance `after` seconds and wait for a probe job due then to run.

    The dispatcher claims due entries in order on one thread, so once the
    probe ran, every entry due before it has been decided.
    """
    sched.schedule("probe", jobs.record, after, args=("probe",))
    clock.advance(after)
    wait_until(lambda: len(finished_runs(sched, "probe")) >= 1, message="the probe ran")


NO_GENERATION = race_jobs.claim_without("generation")
NO_STATE = race_jobs.claim_without("state")

# --- deschedule vs claim ----------------------------------------------------------------


@pytest.mark.parametrize(
    "impl",
    [None, broken("broken-claim-without-state", NO_STATE, "a descheduled job starts")],
    ids=["correct", "broken"],
)
def test_deschedule_commits_before_the_claim_so_the_run_never_starts(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, impl: ClaimImpl | None
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", impl, before=True)
    with patch_store(sched, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # the dispatcher is about to claim
        assert sched.deschedule("a") is True  # ... and the deschedule commits first
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert isinstance(seam.results[0], ClaimMiss)
        probe(sched, fake_clock, 30.0)
    assert jobs.calls("a") == []
    assert run_rows(sched, "a") == []
    assert job_state(sched, "a") == "descheduled"


class SignallingCondition(threading.Condition):
    """A Condition that says when someone starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


@pytest.mark.parametrize(
    "broken_wait",
    [False, broken("broken-wait-returns-at-once", True, "deschedule(wait=True) does not wait")],
    ids=["correct", "broken"],
)
def test_claim_commits_before_deschedule_so_the_run_starts_and_wait_waits(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, broken_wait: bool
) -> None:
    sched = make_scheduler()
    cond = SignallingCondition()
    sched._runs._inflight_cond = cond
    sched.start()
    seam = claim_seam(seams, sched, "a", after=True)
    gate = jobs.gate("a")
    returned: dict[str, Any] = {}

    def deschedule() -> None:
        returned["removed"] = sched.deschedule("a", wait=True, timeout=TIMEOUT)
        returned["run_finished"] = gate.finished.is_set()

    with (
        patch.object(sched._store, "claim_runs", side_effect=batch_claims(seam)),
        patch.object(sched._runs, "wait_for_job", return_value=None) if broken_wait else _nothing(),
    ):
        sched.schedule("a", jobs.block, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.returned.wait(TIMEOUT)  # the claim committed, not yet handed to a worker
        assert isinstance(seam.results[0], Claim)
        t = threading.Thread(target=deschedule, name="test-deschedule")
        t.start()
        wait_until(lambda: sched.get_job("a") is None, message="deschedule committed")
        seam.go_after()
        assert gate.started.wait(TIMEOUT)  # the claimed run starts although descheduled
        wait_until(lambda: cond.waiting.is_set() or not t.is_alive(), message="deschedule waits or returns")
        assert t.is_alive(), "deschedule(wait=True) returned while its run was in flight"
        gate.release.set()
        t.join(TIMEOUT)
        assert not t.is_alive()
    assert returned == {"removed": True, "run_finished": True}
    assert run_rows(sched, "a") == [(1, "ok")]
    probe(sched, fake_clock, 30.0)
    assert len(jobs.calls("a")) == 1


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# --- replace vs claim -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "finish_impl",
    [None, broken("broken-finish-by-job-id", race_jobs.finish_by_job_id_only, "old completion moves the new one")],
    ids=["correct", "broken"],
)
def test_old_generation_claimed_first_finishes_without_disturbing_the_new_one(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    finish_impl: Callable[..., Instant | None] | None,
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", after=True)
    store = store_of(sched)
    finish = real_finish_run(store) if finish_impl is None else functools.partial(finish_impl, store)
    with (
        patch.object(store, "claim_runs", side_effect=batch_claims(seam)),
        patch.object(store, "finish_runs", side_effect=batch_finishes(finish)),
    ):
        sched.schedule("a", jobs.block, 10.0, args=("old",))
        fake_clock.advance(10.0)
        assert seam.returned.wait(TIMEOUT)  # generation 1 claimed at T+10
        new = sched.schedule("a", jobs.block, 7.0, args=("new",))  # replaced meanwhile
        assert (new.generation, new.next_run_at) == (2, at(17))
        seam.go_after()
        old_gate = jobs.gate("old")
        assert old_gate.started.wait(TIMEOUT)  # the old run may still start and finish
        old_gate.release.set()
        wait_until(lambda: run_rows(sched, "a") == [(1, "ok")], message="the old run finished")
        assert sched.get_job("a") == new  # untouched by the old completion
        jobs.gate("new").release.set()
        fake_clock.advance(7.0)
        wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="the new generation ran")
    latest = finished_runs(sched, "a")[0]
    assert (latest.generation, latest.scheduled_for, latest.outcome) == (2, at(17), "ok")
    assert [c.generation for c in jobs.calls("old")] == [1]
    assert [c.generation for c in jobs.calls("new")] == [2]


@pytest.mark.parametrize(
    "impl",
    [None, broken("broken-claim-without-generation", NO_GENERATION, "an old entry starts the new definition")],
    ids=["correct", "broken"],
)
def test_replace_commits_before_the_claim_so_the_old_generation_never_starts(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, impl: ClaimImpl | None
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", impl, before=True)
    with patch_store(sched, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("old",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # generation 1 about to be claimed
        # Due at once, so only the generation tells the stale entry apart.
        new = sched.schedule("a", jobs.record, 10.0, args=("new",), start_in=0)
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert isinstance(seam.results[0], ClaimMiss)
        wait_until(lambda: len(finished_runs(sched, "a")) >= 1, message="the new generation ran")
        probe(sched, fake_clock, 5.0)
    assert jobs.calls("old") == []
    assert [(c.generation, c.args) for c in jobs.calls("new")] == [(2, ())]
    assert run_rows(sched, "a") == [(2, "ok")]
    assert new.generation == 2


@pytest.mark.parametrize(
    "finish_impl",
    [None, broken("broken-finish-by-job-id", race_jobs.finish_by_job_id_only, "old completion moves the new one")],
    ids=["correct", "broken"],
)
def test_completion_of_an_old_generation_vs_a_new_definition(
    make_scheduler: SchedulerFactory,
    seams: list[Seam],
    fake_clock: FakeClock,
    finish_impl: Callable[..., Instant | None] | None,
) -> None:
    """The old run's completion is held in the store while the id is descheduled and
    scheduled again with the very same definition: only the generation differs.

    The change pick-up is kept out (its first round over, no check due): it may queue
    the job's slot a second time (it re-reads every changed row, this scheduler's own
    too), and that entry, due with the completion, would claim in the completion's
    transaction, so the held completion would hold the write lock that deschedule needs."""
    sched = make_scheduler(start=True, pickup_seconds=600.0, pickup_check_seconds=600.0)
    heartbeat_settled(sched, fake_clock)
    seam = finish_seam(seams, sched, "a", finish_impl, before=True)
    with patch_store(sched, "finish_runs", side_effect=batch_finishes(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # generation 1 ran; its completion is pending
        assert sched.deschedule("a") is True
        new = sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=3.0)
        assert (new.generation, new.next_run_at) == (2, at(13))
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert seam.results == [None]
        assert sched.get_job("a") == new
        fake_clock.advance(3.0)
        wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="the new generation ran")
    assert [(c.generation, c.scheduled_for) for c in jobs.calls("a")] == [(1, at(10)), (2, at(13))]
    job = sched.get_job("a")
    assert job is not None
    assert (job.generation, job.next_run_at) == (2, at(23))


# --- shutdown vs claim ------------------------------------------------------------------------


def shutdown_workers_first(sched: JobScheduler, wait: bool = True, timeout: float | None = None) -> None:
    """A broken shutdown: no claim gate, and workers told to stop before the
    dispatcher has handed over the claim it is making."""
    with sched._lifecycle._state_lock:
        sched._lifecycle.state = "stopped"
    sched._runs._stopping = True
    sched._dispatcher.stop()
    sched._dispatcher.pool.stop()
    sched._dispatcher.join(TIMEOUT)
    sched._dispatcher.pool.join(lambda: TIMEOUT)
    sched._heartbeat.stop()
    sched._heartbeat.join(TIMEOUT)
    sched._store.engine.dispose()


@pytest.mark.parametrize(
    "broken_shutdown",
    [False, broken("broken-shutdown-workers-first", True, "a claimed run is never executed")],
    ids=["correct", "broken"],
)
def test_shutdown_waits_for_a_claim_inside_the_store(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, broken_shutdown: bool
) -> None:
    sched = make_scheduler(start=True)
    seam = claim_seam(seams, sched, "a", before=True)
    done = threading.Event()

    def shutdown() -> None:
        if broken_shutdown:
            shutdown_workers_first(sched)
        else:
            sched.shutdown(wait=True, timeout=TIMEOUT)
        done.set()

    with patch.object(sched._store, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # the dispatcher is inside the claim
        t = threading.Thread(target=shutdown, name="test-shutdown")
        t.start()
        wait_until(lambda: sched._lifecycle.state == "stopped", message="shutdown began")
        assert not done.is_set()  # it cannot finish while the claim is open
        seam.go()
        t.join(TIMEOUT)
        assert not t.is_alive()
    assert isinstance(seam.results[0], Claim)  # the claim committed ...
    assert run_rows(sched, "a") == [(1, "ok")]  # ... and its run finished
    assert job_state(sched, "a") == "scheduled"  # nothing left 'running'
    assert db(sched, "SELECT count(*) FROM persched_runs WHERE outcome IS NULL") == [(0,)]
    assert len(jobs.calls("a")) == 1


def claim_ignoring_stop(
    sched: JobScheduler, due: list[ClaimEntry], completions: Sequence[Completion], hand_over: HandOver
) -> Dispatched:
    """A broken `RunBook.claim_due`: it never looks at the stop flag."""
    runs = sched._runs
    dispatched = runs.write_completions(completions)
    for job_id, generation, due_at, _ in due:
        with runs._inflight_cond:
            runs._inflight_jobs[job_id] += 1
        result = claim_one(
            sched._store, job_id, generation, due_at, sched._timebase.now(), sched.instance_id, sched._config.lease
        )
        if isinstance(result, Claim):
            with runs._inflight_cond:
                runs._inflight_runs.add(result.run_id)
            hand_over(result)
            dispatched.handed_over += 1
        else:
            runs.job_done(job_id, None)
    return dispatched


@pytest.mark.parametrize(
    "broken_claim",
    [False, broken("broken-claim-ignores-stop", True, "a claim commits after shutdown began")],
    ids=["correct", "broken"],
)
def test_a_claim_attempted_after_shutdown_began_never_commits(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, broken_claim: bool
) -> None:
    sched = make_scheduler(start=True)
    callback = functools.partial(claim_ignoring_stop, sched) if broken_claim else sched._runs.claim_due
    seam = Seam(callback, before=True)  # holds the dispatcher before it takes the claim gate
    seams.append(seam)
    store = sched._store
    with (
        patch.object(sched._runs, "claim_due", side_effect=seam),
        patch.object(store, "claim_runs", wraps=store.claim_runs) as spy,
    ):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert seam.entered.wait(TIMEOUT)  # an entry is popped, a worker reserved
        t = threading.Thread(target=sched.shutdown, kwargs={"wait": True, "timeout": TIMEOUT}, name="test-shutdown")
        t.start()
        wait_until(lambda: sched._runs._stopping, message="shutdown set its flag")
        seam.go()
        t.join(TIMEOUT)
        assert not t.is_alive()
    assert seam.results == [Dispatched()]  # nothing claimed, nothing handed over
    spy.assert_not_called()
    assert run_rows(sched, "a") == []
    assert job_state(sched, "a") == "scheduled"  # the slot is still there for the next start
    assert db(sched, "SELECT next_run_at FROM persched_jobs")[0][0].startswith("2027-01-15 08:00:10")


# --- other jobs are not held back ------------------------------------------------------------------


def test_a_blocked_job_does_not_hold_back_other_jobs(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True, workers=2)
    sched.schedule("slow", jobs.block, 10.0, args=("slow",))
    sched.schedule("fast", jobs.record, 10.0, args=("fast",), start_in=15.0)
    fake_clock.advance(10.0)
    gate = jobs.gate("slow")
    assert gate.started.wait(TIMEOUT)
    for k in range(1, 6):
        fake_clock.advance(10.0)
        wait_until(lambda k=k: len(finished_runs(sched, "fast")) == k, message=f"fast run {k}")  # type: ignore[misc]  # bound per iteration
    assert len(jobs.calls("slow")) == 1  # never overlaps itself
    gate.release.set()
    # The slots that passed while it ran coalesce into one run, right away.
    wait_until(lambda: len(finished_runs(sched, "slow")) == 2, message="the coalesced run")
    assert [r.scheduled_for for r in finished_runs(sched, "slow")] == [at(60), at(10)]


# --- leases -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "forget_own_runs",
    [False, broken("broken-heartbeat-forgets-own-runs", True, "a live run is recovered as lost")],
    ids=["correct", "broken"],
)
def test_lease_recovery_never_marks_a_live_own_run_lost(
    make_scheduler: SchedulerFactory, seams: list[Seam], fake_clock: FakeClock, forget_own_runs: bool
) -> None:
    sched = make_scheduler(start=True, lease_seconds=30.0)
    quiet_heartbeat(sched)
    seam = finish_seam(seams, sched, "a", before=True)
    gate = jobs.gate("a")
    with (
        patch.object(sched._store, "finish_runs", side_effect=batch_finishes(seam)),
        patch.object(sched._heartbeat.leases, "_in_flight", return_value=set()) if forget_own_runs else _nothing(),
    ):
        sched.schedule("a", jobs.block, 10.0, args=("a",))
        fake_clock.advance(10.0)
        assert gate.started.wait(TIMEOUT)
        for _ in range(4):  # the run overruns its lease several times over, alive
            fake_clock.advance(25.0)
            sched._heartbeat.leases.round()
        gate.release.set()
        assert seam.entered.wait(TIMEOUT)  # callable done, completion not yet committed
        for _ in range(2):
            fake_clock.advance(25.0)
            sched._heartbeat.leases.round()
        assert run_rows(sched, "a") == [(1, None)]
        seam.go()
        assert seam.done.wait(TIMEOUT)
        assert seam.results[0] is not None  # owned: the job is queued again
        # The callable returned at T+110, so the job moved on to slot T+110 (the
        # slots it overran coalesce), which is already due: it runs at once,
        # for the latest slot at or before T+160.
        wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="the coalesced run")
    assert run_rows(sched, "a") == [(1, "ok"), (1, "ok")]
    assert [r.scheduled_for for r in finished_runs(sched, "a")] == [at(160), at(10)]


DEAD = "dead:0:000000"


@pytest.mark.parametrize(
    "wall_clock_expiry",
    [False, broken("broken-expiry-by-wall-clock", True, "a wall step fakes a death")],
    ids=["correct", "broken"],
)
def test_a_dead_instances_run_is_recovered_after_a_lease_of_observation(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, wall_clock_expiry: bool
) -> None:
    sched = make_scheduler(start=True, instance_id="b", lease_seconds=30.0)
    quiet_heartbeat(sched)
    leases = sched._heartbeat.leases
    beat = functools.partial(race_jobs.wall_clock_beat, leases) if wall_clock_expiry else leases.round
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    # A dead instance claimed the slot at T+10 and will never renew.
    assert isinstance(claim_one(sched._store, "a", 1, at_us(10), at_us(10), DEAD, Micros(30_000_000)), Claim)
    beat()  # first observation, at T+0 on this instance's monotonic clock
    fake_clock.advance(10.0)
    beat()
    fake_clock.step_wall(3600.0)  # an NTP step: no time has really passed
    beat()
    fake_clock.advance(19.0)
    beat()
    assert run_rows(sched, "a") == [(1, None)], "recovered before a full lease of observation"
    fake_clock.advance(1.0)
    beat()
    assert run_rows(sched, "a")[0] == (1, "lost")
    wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="the job carried on")
    lost, carried_on = reversed(finished_runs(sched, "a"))
    assert (lost.instance_id, lost.scheduled_for, lost.outcome) == (DEAD, at(10), "lost")
    assert (carried_on.instance_id, carried_on.outcome) == ("b", "ok")
    assert carried_on.scheduled_for > at(10)  # the lost slot is not run again
    assert jobs.calls("a")[0].scheduled_for == carried_on.scheduled_for


@pytest.mark.parametrize(
    "wall_clock_expiry",
    [False, broken("broken-expiry-by-wall-clock", True, "a wall step fakes a death")],
    ids=["correct", "broken"],
)
def test_a_wall_clock_step_does_not_make_a_live_run_look_expired(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, wall_clock_expiry: bool
) -> None:
    """A live node must not be declared dead by a clock step."""
    observer = make_scheduler(start=True, instance_id="observer", lease_seconds=30.0)
    owner = make_scheduler(start=True, instance_id="owner", lease_seconds=30.0)
    quiet_heartbeat(observer)
    quiet_heartbeat(owner)
    leases = observer._heartbeat.leases
    beat = functools.partial(race_jobs.wall_clock_beat, leases) if wall_clock_expiry else leases.round
    job = next(f"a{n}" for n in itertools.count() if owner_among(("observer", "owner"), f"a{n}") == "owner")
    gate = jobs.gate(job)
    owner.schedule(job, jobs.block, 10.0, args=(job,))  # only the owner's heap has it
    fake_clock.advance(10.0)
    assert gate.started.wait(TIMEOUT)
    for k in range(6):
        fake_clock.advance(10.0)
        owner._heartbeat.leases.round()  # alive: renews
        beat()
        if k == 2:
            fake_clock.step_wall(3600.0)
            beat()
    assert run_rows(owner, job) == [(1, None)]
    gate.release.set()
    wait_until(lambda: run_rows(owner, job)[0] == (1, "ok"), message="the run finished")
    run = finished_runs(owner, job)[-1]
    assert (run.instance_id, run.scheduled_for, run.outcome) == ("owner", at(10), "ok")
    assert db(owner, "SELECT count(*) FROM persched_runs WHERE outcome = 'lost'") == [(0,)]


def test_store_seams_forward_everything_else(make_scheduler: SchedulerFactory, seams: list[Seam]) -> None:
    """The seam itself: unmatched calls pass straight through to the store."""
    sched = make_scheduler()
    seam = claim_seam(seams, sched, "other", before=True)
    with patch_store(sched, "claim_runs", side_effect=batch_claims(seam)):
        sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=0)
        result = claim_one(store_of(sched), "a", 1, at_us(1e9), at_us(1e9), "x", Micros(30_000_000))
    assert isinstance(result, Claim)
    assert (seam.calls, seam.results) == (1, [])
    assert isinstance(store_of(sched), Store)
