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
Each race test also runs against the code under test with one safeguard
removed (marked ``xfail(strict=True, raises=AssertionError)``: it must fail
on the test's invariant, not crash), so the suite proves that the test can
fail. They live here so that the store contract tests and the scheduler race
tests share them.

A broken claim is the real claim less one named clause of its predicate
(`claim_without`). The other store variants are hand copies with the
safeguard written out of them, because it is not one clause that a seam
could drop: a completion's ownership is decided twice (the row read under
the write lock and matched on generation and slot in Python, then the
UPDATE's own predicate), so dropping one clause of either changes nothing,
and the classic bug lacks both (`finish_by_job_id_only`); pause, resume and
run-now decide in Python from a row read under lock (`persched._store.jobs`
has no clause-level seam).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

from sqlalchemy import Connection, update

from persched._model.instant import Instant, Micros, from_datetime, to_datetime
from persched._store import Claim, ClaimMiss, Completion, RunNowAnswer, RunNowVerdict, Store, claim_batch, claims
from persched._store.dialects import Sql
from persched._store.schema import jobs, runs
from tests.support.helpers import TIMEOUT
from tests.support.postgres import pg_base_url

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from persched._engine.leases import Leases
    from persched._model.triggers import JitterReach
    from persched._store import ClaimEntry
    from persched._store.dialects import Dialect

__all__ = [
    "RECORD",
    "ClaimFn",
    "Seam",
    "claim_without",
    "finish_by_job_id_only",
    "noop",
    "pg_base_url",
    "wall_clock_beat",
    "work",
]

RECORD: Final = "tests.support.jobs:record"  # a plain, fast target reference

ClaimFn = Callable[..., "Claim | ClaimMiss"]


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


# --- broken variants of the claim: the real one, less one clause ---------------------


Expected = dict[tuple[str, int], tuple[Instant, Instant]]  # the claim's entries: (job_id, generation) -> bounds


class _EntryByJobId(claim_batch.ClaimBatch):
    """The batch of a claim without its "generation" clause: such a claim may win a row of
    another generation than its entry's, which the real batch (keyed on both) cannot
    place; find the entry by job id alone, as a claim keyed on the id would."""

    def __init__(
        self, expected: Expected, claimed_at: Instant, instance_id: str, lease_until: Instant, reach: JitterReach
    ) -> None:
        # re-keyed below: not the caller's
        super().__init__(dict(expected), claimed_at, instance_id, lease_until, reach)
        self.won_in: dict[str, int] = {}  # job id -> the generation of the row won for its entry

    def decide(self, row: claim_batch.ClaimedRow) -> None:
        for job_id, generation in [key for key in self.expected if key[0] == row.job_id]:
            if generation != row.generation:
                self.expected[(job_id, row.generation)] = self.expected.pop((job_id, generation))
                self.won_in[job_id] = row.generation
        super().decide(row)

    def results(
        self, entries: Sequence[ClaimEntry], misses: dict[tuple[str, int], ClaimMiss]
    ) -> list[Claim | ClaimMiss]:
        return super().results([(j, self.won_in.get(j, g), e, t) for j, g, e, t in entries], misses)


class _UpToItsSlot(claim_batch.ClaimBatch):
    """The batch of a claim without its "slot" clause: such a claim may win a row whose slot
    is not due by its entry's bound (and no run-now request is), which the policy refuses
    to decide (it never runs a slot early); let the entry's bound reach the row's slot."""

    def __init__(
        self, expected: Expected, claimed_at: Instant, instance_id: str, lease_until: Instant, reach: JitterReach
    ) -> None:
        super().__init__(dict(expected), claimed_at, instance_id, lease_until, reach)

    def decide(self, row: claim_batch.ClaimedRow) -> None:
        key = (row.job_id, row.generation)
        bound, taken_at = self.expected[key]
        next_at, run_now_at = row.next_at, row.run_now_at
        if next_at > bound and (run_now_at is None or run_now_at > bound):
            self.expected[key] = (next_at, taken_at)  # the row the slot clause kept out
        super().decide(row)


_REAL_CLAUSES: Final = claims.claim_clauses
_REAL_BATCH: Final = claim_batch.ClaimBatch
# How a claim's per-row decision must bend to take the rows a dropped clause lets in (the others need nothing).
_BATCHES: Final[dict[str, type[claim_batch.ClaimBatch]]] = {"generation": _EntryByJobId, "slot": _UpToItsSlot}


class _ClauseDropper:
    """Makes the claims of one thread go without one named clause of the real predicate.

    `persched._store.claims` looks `claim_clauses` (and `ClaimBatch`) up at
    each claim, so wrappers patched in there reach the real
    `Store.claim_runs`. The patch stays in while any thread needs it and asks
    a thread-local which clause to drop: two broken claims racing each other
    (a `Barrier`), or a real claim on another thread, each see their own
    predicate, and patches nested across threads never restore the wrong one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._patch = patch.multiple(claims, claim_clauses=self._clauses, ClaimBatch=self._batch)
        self._local = threading.local()

    def _dropped(self) -> str | None:
        return getattr(self._local, "clause", None)

    def _clauses(self, expected: Expected, dialect: Dialect) -> dict[str, Sql]:
        clauses = _REAL_CLAUSES(expected, dialect)
        dropped = self._dropped()
        if dropped is not None:
            del clauses[dropped]  # a KeyError if the library renamed it: a failure, never an xfail
        return clauses

    def _batch(
        self, expected: Expected, claimed_at: Instant, instance_id: str, lease_until: Instant, reach: JitterReach
    ) -> claim_batch.ClaimBatch:
        batch = _BATCHES.get(self._dropped() or "", _REAL_BATCH)
        return batch(expected, claimed_at, instance_id, lease_until, reach)

    @contextlib.contextmanager
    def dropping(self, clause: str) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._patch.start()
            self._users += 1
        self._local.clause = clause
        try:
            yield
        finally:
            self._local.clause = None
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._patch.stop()


_DROPPER: Final = _ClauseDropper()


def claim_without(clause: str) -> ClaimFn:
    """The real claim of one entry (``claim_run``'s arguments, the store first) less one
    clause of its predicate (`persched._store.claims.claim_clauses`: "state", "paused",
    "generation", "slot", "ids"), for that one call and on its thread only.

    A test that passes with the real claim and fails with a clause dropped
    proves that clause matters.
    """

    def claim(
        store: Store, job_id: str, generation: int, expected_at: Instant, now: Instant, instance_id: str, lease: Micros
    ) -> Claim | ClaimMiss:
        with _DROPPER.dropping(clause):
            return real_claim_run(store)(job_id, generation, expected_at, now, instance_id, lease)

    return claim


# --- broken variants of the store, by hand (module docstring) --------------------


def finish_by_job_id_only(
    store: Store,
    claim: Claim,
    instance_id: str,
    finished_at: Instant,
    outcome: str,
    error: str | None,
) -> Instant | None:
    """A broken `Store.finish_run`: its job UPDATE is keyed on job_id alone.

    The classic bug: a stale completion moves whatever
    definition now holds the id.
    """

    def body(conn: Connection) -> Instant | None:
        conn.execute(
            update(runs)
            .where(runs.c.run_id == claim.run_id, runs.c.outcome.is_(None))
            .values(finished_at=to_datetime(finished_at), outcome=outcome, error=error, lease_until=None)
        )
        finished = Sql(
            "state = ?, owner = NULL, lease_until = NULL, running_for = NULL, run_count = run_count + 1, "
            "last_outcome = ?, updated_at = ?",
            ("scheduled", outcome, store.dialect.bind_instant(finished_at)),
        )
        # through the dialect: MySQL has no UPDATE ... RETURNING
        rows = store.dialect.update_sql(conn, jobs, finished, Sql("job_id = ?", (claim.job_id,)), "next_run_at")
        return store.dialect.raw_instant(rows[0].next_run_at) if rows else None

    return store._write(body, "finish run (test variant)")


def wall_clock_beat(leases: Leases) -> None:
    """A broken `Leases.round`: expiry judged by comparing the stored
    ``lease_until`` with the local *wall* clock."""
    running_here = leases._in_flight()
    timebase = leases._timebase
    if running_here:
        leases._store.renew_leases(leases._instance_id, Instant(timebase.now() + leases._lease), running_here)
    wall = timebase.clock.now_us()
    for run in leases._store.open_runs():
        if run.run_id in running_here or run.lease_until is None:
            continue
        if from_datetime(run.lease_until) <= wall:
            leases.recover(run)


# --- PostgreSQL -------------------------------------------------------------------


def resume_by_job_id_only(store: Store, job_id: str, now: Instant) -> tuple[int, Instant | None] | None:
    """A broken `Store.resume_job`: it unpauses whatever row holds the id, in any state."""

    def body(conn: Connection) -> tuple[int, Instant | None] | None:
        resumed = Sql("paused = ?, state = ?, next_run_at = ?", (False, "scheduled", store.dialect.bind_instant(now)))
        rows = store.dialect.update_sql(conn, jobs, resumed, Sql("job_id = ?", (job_id,)), "generation")
        return (rows[0].generation, now) if rows else None

    return store._write(body, "resume (test variant)")


def pause_keeping_run_now(
    store: Store, job_id: str, now: Instant, *, until: Instant | None = None, note: str | None = None
) -> int | None:
    """A broken `Store.pause_job`: it leaves a pending run-now request in place."""

    def body(conn: Connection) -> int | None:
        at = store.dialect.bind_instant
        paused = Sql(
            "paused = ?, paused_until = ?, pause_note = ?, updated_at = ?",
            (True, None if until is None else at(until), note, at(now)),
        )
        which = Sql("job_id = ? AND state IN (?, ?) AND paused = ?", (job_id, "scheduled", "running", False))
        rows = store.dialect.update_sql(conn, jobs, paused, which, "generation")
        return int(rows[0].generation) if rows else None

    return store._write(body, "pause (test variant)")


def run_now_ignoring_pause(store: Store, job_id: str, now: Instant) -> RunNowAnswer:
    """A broken `Store.request_run_now`: it records the request without looking at the pause."""

    def body(conn: Connection) -> RunNowAnswer:
        requested = Sql("run_now_at = ?", (store.dialect.bind_instant(now),))
        rows = store.dialect.update_sql(conn, jobs, requested, Sql("job_id = ?", (job_id,)), "generation")
        if not rows:
            return RunNowAnswer(RunNowVerdict.UNKNOWN, None)
        return RunNowAnswer(RunNowVerdict.REQUESTED, rows[0].generation)

    return store._write(body, "run now (test variant)")
