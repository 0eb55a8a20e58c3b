"""Targets, seams and deliberately broken variants for the race and stress tests.

Seams
-----
A `Seam` wraps one store method (or the dispatcher's claim callback) and
blocks a chosen call *before* and/or *after* the real method, until the test
releases it. That forces an interleaving without sleeping: "the claim has
committed but the scheduler has not seen the result yet", "the deschedule is
waiting for the write lock", and so on. Every wait is bounded by `TIMEOUT`.

Broken variants
---------------
Each race test also runs against a copy of the code under test with one
safeguard removed (marked ``xfail(strict=True)``), so the suite proves that
the test can fail. The copies live here so that the store contract tests and
the scheduler race tests share them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, or_, update

from persched._instant import Instant, Micros, from_datetime, to_datetime
from persched._schema import jobs, runs
from persched._store import Claim, ClaimMiss, Completion, Store
from persched._store._rows import read_row
from persched._store.claims import _misses
from persched._store.mappers import plan_of
from tests.support.helpers import TIMEOUT
from tests.support.postgres import pg_base_url, pg_schema

if TYPE_CHECKING:
    from persched._heartbeat import Heartbeat

__all__ = [
    "RECORD",
    "ClaimFn",
    "FinishFn",
    "Seam",
    "claim_variant",
    "finish_by_job_id_only",
    "noop",
    "pg_base_url",
    "pg_schema",
    "wall_clock_beat",
    "work",
]

RECORD: Final = "tests.support.jobs:record"  # a plain, fast target reference

ClaimFn = Callable[..., "Claim | ClaimMiss"]
FinishFn = Callable[..., bool]


# --- targets ---------------------------------------------------------------------


def noop(*args: object) -> None:
    """Do nothing (stress runs: the database row is the record)."""


def work(seconds: float) -> None:
    """Stand for a short piece of work, so that overlapping runs would overlap."""
    time.sleep(seconds)


# --- seams -----------------------------------------------------------------------


class Seam:
    """Wraps `real`; blocks the first `count` matching calls before/after it.

    Args:
        real: The method to call (already bound, or taking the same arguments).
        before: Block matching calls before calling `real` until `go()`.
        after: Block matching calls after `real` returned until `go_after()`.
        match: Which calls to block (default: all), given the call's args.
        count: How many matching calls to block.
    """

    def __init__(
        self,
        real: Callable[..., Any],
        *,
        before: bool = False,
        after: bool = False,
        match: Callable[..., bool] | None = None,
        count: int = 1,
    ) -> None:
        self.real = real
        self.before = before
        self.after = after
        self.match = match
        self.left = count
        self.entered = threading.Event()  # a blocked call arrived (before `real`)
        self.returned = threading.Event()  # a blocked call's `real` returned
        self.done = threading.Event()  # a blocked call is about to return to its caller
        self._go = threading.Event()
        self._go_after = threading.Event()
        self._lock = threading.Lock()
        self.results: list[Any] = []  # results of the blocked calls
        self.errors: list[BaseException] = []
        self.calls = 0  # every call, blocked or not

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - a transparent wrapper
        with self._lock:
            self.calls += 1
            blocked = self.left > 0 and (self.match is None or self.match(*args, **kwargs))
            if blocked:
                self.left -= 1
        if not blocked:
            return self.real(*args, **kwargs)
        if self.before:
            self.entered.set()
            assert self._go.wait(TIMEOUT), "seam: never released (before)"
        try:
            result = self.real(*args, **kwargs)
        except BaseException as exc:
            self.errors.append(exc)
            self.returned.set()
            self.done.set()
            raise
        self.results.append(result)
        self.returned.set()
        if self.after:
            assert self._go_after.wait(TIMEOUT), "seam: never released (after)"
        self.done.set()
        return result

    def go(self) -> None:
        """Let blocked calls proceed into the real method."""
        self._go.set()

    def go_after(self) -> None:
        """Let blocked calls return to their caller."""
        self._go_after.set()

    def release(self) -> None:
        """Release everything (teardown)."""
        self.left = 0
        self._go.set()
        self._go_after.set()


def for_job(job_id: str) -> Callable[..., bool]:
    """A `Seam.match` for store methods whose first argument is the job id (or a Claim)."""

    def match(first: object, *args: object, **kwargs: object) -> bool:
        return getattr(first, "job_id", first) == job_id

    return match


def batch_claims(single: Callable[..., Any]) -> Callable[..., list[Any]]:
    """Adapt a one-entry claim (``claim_run``'s arguments) to ``Store.claim_runs``, entry by entry."""

    def claim_runs(
        entries: list[tuple[str, int, Instant, Instant]],
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
    ) -> list[Any]:
        at = now() if callable(now) else now
        return [single(job_id, gen, expected, at, instance_id, lease) for job_id, gen, expected, _ in entries]

    return claim_runs


def batch_finishes(single: Callable[..., Instant | None]) -> Callable[..., list[Instant | None]]:
    """Adapt a one-run completion (``finish_run``'s arguments) to ``Store.finish_runs``."""

    def finish_runs(completions: list[Completion], instance_id: str) -> list[Instant | None]:
        return [single(c.claim, instance_id, c.finished_at, c.outcome, c.error) for c in completions]

    return finish_runs


def real_claim_run(store: Store) -> Callable[..., Claim | ClaimMiss]:
    """`Store.claim_run` of `store` that bypasses a patched ``store.claim_runs``."""

    def claim_run(job_id: str, gen: int, expected: Instant, now: Instant, instance_id: str, lease: Micros) -> Any:  # noqa: ANN401
        return Store.claim_runs(store, [(job_id, gen, expected, now)], now, instance_id, lease)[0]

    return claim_run


def real_finish_run(store: Store) -> Callable[..., Instant | None]:
    """`Store.finish_run` of `store` that bypasses a patched ``store.finish_runs``."""

    def finish_run(
        claim: Claim, instance_id: str, finished_at: Instant, outcome: str, error: str | None
    ) -> Instant | None:
        return Store.finish_runs(store, [Completion(claim, outcome, error, finished_at)], instance_id)[0]

    return finish_run


# --- broken variants of the store ------------------------------------------------


def claim_variant(
    store: Store,
    job_id: str,
    generation: int,
    expected_at: Instant,
    now: Instant,
    instance_id: str,
    lease: Micros,
    *,
    check_generation: bool = True,
    check_state: bool = True,
    check_slot: bool = True,
    check_paused: bool = True,
) -> Claim | ClaimMiss:
    """A copy of `Store.claim_run` whose predicates can be dropped one by one.

    With every check on it behaves as the real one; a test that passes with
    the real claim and fails with a check dropped proves that check matters.
    """
    lease_until = to_datetime(now + lease)
    where = [jobs.c.job_id == job_id]
    if check_generation:
        where.append(jobs.c.generation == generation)
    if check_state:
        where.append(jobs.c.state == "scheduled")
    if check_slot:  # the grid's slot is due, or a run-now request is (as in the real claim)
        bound = to_datetime(expected_at)
        where.append(or_(jobs.c.next_run_at <= bound, jobs.c.run_now_at <= bound))
    if check_paused:
        where.append(jobs.c.paused.is_(False))

    def body(conn: Connection) -> Claim | ClaimMiss:
        won = conn.execute(
            update(jobs)
            .where(*where)
            .values(state="running", owner=instance_id, lease_until=lease_until, updated_at=to_datetime(now))
            .returning(*jobs.c)
        ).first()
        if won is None:
            return _misses(conn, {job_id: expected_at}).get(job_id, ClaimMiss(None))
        plan = plan_of(read_row(jobs.c, won._mapping))
        next_at = from_datetime(won.next_run_at)
        run_now_at = None if won.run_now_at is None else from_datetime(won.run_now_at)
        run_now = False
        if next_at > expected_at and run_now_at is not None and run_now_at <= expected_at:
            slot, following, run_now = run_now_at, next_at, True  # a run-now request, off the grid
        elif next_at > now:  # a variant without the slot check: runs a slot early
            slot, following = next_at, plan.slot_after(next_at)
        else:
            decision = plan.claim(next_at, None, next_at, now, now)
            assert decision.run_for is not None
            slot, following = decision.run_for, decision.next_run_at
        conn.execute(
            update(jobs)
            .where(jobs.c.job_id == job_id)
            .values(
                next_run_at=to_datetime(following),
                running_for=to_datetime(slot),
                run_now_at=None if run_now else won.run_now_at,
            )
        )
        result = conn.execute(
            runs.insert().values(
                job_id=job_id,
                generation=won.generation,
                scheduled_for=to_datetime(slot),
                started_at=to_datetime(now),
                instance_id=instance_id,
                lease_until=lease_until,
                run_now=run_now,
            )
        )
        (run_id,) = result.inserted_primary_key or (None,)
        assert isinstance(run_id, int)
        return Claim(job_id, won.generation, won.target, won.args, won.kwargs, slot, now, run_id, run_now)

    return store._write(body, "claim (test variant)")


def finish_by_job_id_only(
    store: Store,
    claim: Claim,
    instance_id: str,
    finished_at: Instant,
    outcome: str,
    error: str | None,
) -> Instant | None:
    """A broken `Store.finish_run`: its job UPDATE is keyed on job_id alone.

    The classic bug (FIELD-REPORTS #5): a stale completion moves whatever
    definition now holds the id.
    """

    def body(conn: Connection) -> Instant | None:
        conn.execute(
            update(runs)
            .where(runs.c.run_id == claim.run_id, runs.c.outcome.is_(None))
            .values(finished_at=to_datetime(finished_at), outcome=outcome, error=error, lease_until=None)
        )
        result = conn.execute(
            update(jobs)
            .where(jobs.c.job_id == claim.job_id)
            .values(
                state="scheduled",
                owner=None,
                lease_until=None,
                running_for=None,
                run_count=jobs.c.run_count + 1,
                last_outcome=outcome,
                updated_at=to_datetime(finished_at),
            )
            .returning(jobs.c.next_run_at)
        ).first()
        return None if result is None else from_datetime(result.next_run_at)

    return store._write(body, "finish run (test variant)")


def wall_clock_beat(heartbeat: Heartbeat) -> None:
    """A broken `Heartbeat.beat`: expiry judged by comparing the stored
    ``lease_until`` with the local *wall* clock (FIELD-REPORTS #19)."""
    running_here = heartbeat._in_flight()
    timebase = heartbeat._timebase
    if running_here:
        heartbeat._store.renew_leases(heartbeat._instance_id, Instant(timebase.now() + heartbeat._lease), running_here)
    wall = timebase.clock.now_us()
    for run in heartbeat._store.open_runs():
        if run.run_id in running_here or run.lease_until is None:
            continue
        if from_datetime(run.lease_until) <= wall:
            heartbeat._recover(run)


# --- PostgreSQL -------------------------------------------------------------------


def resume_by_job_id_only(store: Store, job_id: str, now: Instant) -> tuple[int, Instant | None] | None:
    """A broken `Store.resume_job`: it unpauses whatever row holds the id, in any state."""

    def body(conn: Connection) -> tuple[int, Instant | None] | None:
        row = conn.execute(
            update(jobs)
            .where(jobs.c.job_id == job_id)
            .values(paused=False, state="scheduled", next_run_at=to_datetime(now))
            .returning(jobs.c.generation)
        ).first()
        return None if row is None else (row.generation, now)

    return store._write(body, "resume (test variant)")


def pause_keeping_run_now(store: Store, job_id: str, now: Instant) -> int | None:
    """A broken `Store.pause_job`: it leaves a pending run-now request in place."""

    def body(conn: Connection) -> int | None:
        row = conn.execute(
            update(jobs)
            .where(jobs.c.job_id == job_id, jobs.c.state.in_(("scheduled", "running")), jobs.c.paused.is_(False))
            .values(paused=True, updated_at=to_datetime(now))
            .returning(jobs.c.generation)
        ).first()
        return None if row is None else int(row.generation)

    return store._write(body, "pause (test variant)")


def run_now_ignoring_pause(store: Store, job_id: str, now: Instant) -> tuple[str, int | None]:
    """A broken `Store.request_run_now`: it records the request without looking at the pause."""

    def body(conn: Connection) -> tuple[str, int | None]:
        row = conn.execute(
            update(jobs).where(jobs.c.job_id == job_id).values(run_now_at=to_datetime(now)).returning(jobs.c.generation)
        ).first()
        return ("unknown", None) if row is None else ("requested", row.generation)

    return store._write(body, "run now (test variant)")
