"""Child process of the crash-point tests: a scheduler that stops at a NAMED point, to be SIGKILLed there.

Usage::

    python tests/support/crash_child.py --db PATH --starts PATH --ops PATH --marker PATH --point NAME
        [--seed N] [--lease 1.0] [--heartbeat 0.2] [--pickup 0.2] [--deadline 60]

(the repository root must be on ``PYTHONPATH``). Schedules jobs "a" (0.05 s),
"b" (0.1 s) and "c" (0.2 s) whose callable is `proof_jobs.file_tracked`
(every callable start goes to ``--starts``), records each public call it makes
as one JSON line in ``--ops`` (monotonic invocation and response times), starts
a real-clock scheduler with a small lease and waits.

When the scheduler reaches ``--point`` (see `POINTS`), the thread that got there
writes ``--marker`` (JSON, atomically: the point, ``time.monotonic()`` when it
got there and what it was doing, e.g. the run ids) and blocks; the parent then
SIGKILLs the process. Each point is reached by wrapping methods in this
process only (``patch.object`` on `Store` / `JobScheduler` / `proof_jobs`) and
by engine events on ``store_of(sched).engine`` (``after_cursor_execute``,
``commit``, ``rollback``); the library is not changed. A point fires once;
later arrivals pass through.

``--point random`` stops nowhere: the marker says "ready" once the first run
started, and the main thread then replaces, deschedules and re-schedules jobs
at a seeded random pace until it is killed at a random moment.

A child that is never killed exits with status 3 after ``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

from sqlalchemy import event

from persched import JobScheduler, current_run
from persched._engine.runs import RunBook
from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._store import Claim, Recovery, Store
from tests.support import proof_jobs
from tests.support.history import OpLog
from tests.support.seams import now_of, store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Sequence

    from persched._store import ClaimMiss, Completion, OpenRun

__all__ = ["JOBS", "POINTS", "TARGET", "main"]

TARGET: Final = "tests.support.proof_jobs:file_tracked"
JOBS: Final = {"a": 0.05, "b": 0.1, "c": 0.2}
RECOVER_JOB: Final = "r"  # claimed by the dead instance "dead" before start (recovery points)
REPLACED_INTERVAL: Final = 0.07  # "a" is replaced with this interval (upsert points)
HISTORY_BEFORE_ARMING: Final = 6  # callable starts before a point is armed, so that the crash has a past
EXIT_DEADLINE: Final = 3
EXIT_MISSED: Final = 4
# The claim's write back of its won rows, as each engine's `Dialect.update_rows` begins it (upper case;
# SQLite sets every row from one VALUES list, the others bind each row's values in turn).
_CLAIM_WRITE_BACK: Final = (
    "UPDATE PERSCHED_JOBS SET STATE = ?, OWNER = ?",
    "UPDATE PERSCHED_JOBS SET STATE = V.COLUMN1",
)

# name -> where the process stops.
POINTS: Final = {
    "claim-before-tx": "Store.dispatch called with due entries, before its transaction",
    "claim-after-update": "the claim's write back of its won rows executed, not committed",
    "claim-before-commit": "claim UPDATE and run INSERT done, COMMIT not yet issued",
    "claim-after-commit": "the claim committed; the won runs not yet handed to a worker",
    "in-callable": "inside the callable (its start is recorded)",
    "callable-returned": "the callable returned; its outcome not yet handed to the dispatcher",
    "completion-before-write": "Store.finish_runs entered with completions, nothing of them written",
    "completion-after-update": "the completion UPDATEs of runs and jobs executed, not committed",
    "completion-before-commit": "completion written (maybe with claims), COMMIT not yet issued",
    "completion-after-commit": "the completion committed; the dispatcher not yet told",
    "upsert-before-commit": "schedule() replacing 'a': the upsert executed, not committed",
    "upsert-after-commit": "schedule() replacing 'a': committed, schedule() not yet returned",
    "deschedule-before-commit": "deschedule('b'): the UPDATE executed, not committed",
    "deschedule-after-commit": "deschedule('b'): committed, deschedule() not yet returned",
    "recover-after-update": "recovery of the dead instance's run: run marked lost, job not freed, not committed",
    "recover-before-commit": "recovery: run marked lost and job freed, COMMIT not yet issued",
    "recover-after-commit": "recovery committed; the heartbeat not yet queued the job",
}
RECOVER_POINTS: Final = frozenset(p for p in POINTS if p.startswith("recover-"))
OP_POINTS: Final = frozenset(p for p in POINTS if p.startswith(("upsert-", "deschedule-")))


class _Crash:
    """The armed point; `fire` stops the calling thread there for good."""

    def __init__(self, point: str, marker: Path, deadline: float) -> None:
        self.point = point
        self.marker = marker
        self.deadline = deadline
        self.armed = threading.Event()
        self.pending: dict[str, Any] | None = None  # the public call in progress (upsert/deschedule points)
        self._once = threading.Lock()
        self._local = threading.local()

    # Thread-local bookkeeping: which labelled store calls are active, what the open transaction wrote.
    def active(self) -> list[str]:
        if not hasattr(self._local, "active"):
            self._local.active = []
        return self._local.active  # type: ignore[no-any-return]

    def tx(self) -> dict[str, Any]:
        if not hasattr(self._local, "tx"):
            self._local.tx = {}
        return self._local.tx  # type: ignore[no-any-return]

    def depth(self, delta: int = 0) -> int:
        self._local.depth = getattr(self._local, "depth", 0) + delta
        return int(self._local.depth)

    def fire(self, point: str, **info: Any) -> None:  # noqa: ANN401 - JSON values
        if point != self.point or not self.armed.is_set() or not self._once.acquire(blocking=False):
            return
        write_marker(self.marker, {"point": point, "mono": time.monotonic(), "pending": self.pending, **info})
        threading.Event().wait(self.deadline)  # until SIGKILL
        os._exit(EXIT_DEADLINE)


def write_marker(marker: Path, payload: dict[str, Any]) -> None:
    """Write `payload` as JSON to `marker`, atomically."""
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, marker)


def _install(crash: _Crash) -> None:
    """Wrap the store, the scheduler and the job target for `crash.point` (before the scheduler is built)."""
    real_dispatch = Store.dispatch
    real_claim_runs = Store.claim_runs
    real_finish_runs = Store.finish_runs
    real_upsert = Store.upsert_job
    real_deschedule = Store.deschedule_job
    real_recover = Store.recover_run
    real_ended = RunBook.ended
    real_target = proof_jobs.file_tracked

    def dispatch(
        self: Store,
        completions: Sequence[Completion],
        entries: Sequence[tuple[str, int, Instant, Instant]],
        *rest: Any,  # noqa: ANN401
    ) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
        if entries:
            crash.fire("claim-before-tx", jobs=[e[0] for e in entries])
        crash.depth(+1)
        try:
            result = real_dispatch(self, completions, entries, *rest)
        finally:
            crash.depth(-1)
        won = [c.run_id for c in result[1] if isinstance(c, Claim)]
        if completions:
            crash.fire("completion-after-commit", run_ids=[c.claim.run_id for c in completions])
        if won:
            crash.fire("claim-after-commit", run_ids=won)
        return result

    def claim_runs(self: Store, *args: Any, **kwargs: Any) -> list[Claim | ClaimMiss]:  # noqa: ANN401
        crash.active().append("claim")
        try:
            return real_claim_runs(self, *args, **kwargs)
        finally:
            crash.active().remove("claim")

    def finish_runs(self: Store, completions: Sequence[Completion], instance_id: str) -> list[Instant | None]:
        ids = [c.claim.run_id for c in completions]
        if completions:
            crash.fire("completion-before-write", run_ids=ids)
            crash.tx()["finish"] = ids
            crash.active().append("finish")
        try:
            result = real_finish_runs(self, completions, instance_id)
        finally:
            if completions:
                crash.active().remove("finish")
        if completions and crash.depth() == 0:  # else dispatch commits it, and fires
            crash.fire("completion-after-commit", run_ids=ids)
        return result

    def upsert_job(self: Store, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        crash.tx()["upsert"] = True
        job, change, due = real_upsert(self, *args, **kwargs)
        crash.fire("upsert-after-commit", generation=job.generation, change=change)
        return job, change, due

    def deschedule_job(self: Store, *args: Any, **kwargs: Any) -> int | None:  # noqa: ANN401
        crash.tx()["deschedule"] = True
        generation = real_deschedule(self, *args, **kwargs)
        crash.fire("deschedule-after-commit", generation=generation)
        return generation

    def recover_run(self: Store, run: OpenRun, now: Any) -> Recovery:  # noqa: ANN401
        crash.tx()["recover"] = run.run_id
        crash.active().append("recover")
        try:
            result = real_recover(self, run, now)
        finally:
            crash.active().remove("recover")
        if result.lost:
            crash.fire("recover-after-commit", run_id=run.run_id, freed=result.due is not None)
        return result

    def ended(self: RunBook, claim: Claim, outcome: str, error: str | None) -> Completion:
        crash.fire("callable-returned", run_id=claim.run_id, outcome=outcome)
        return real_ended(self, claim, outcome, error)

    def target(path: str) -> None:
        real_target(path)  # records the start (and an end, which the kill makes a lower bound)
        run = current_run()
        crash.fire("in-callable", run_id=None if run is None else run.run_id)

    for owner, name, new in (
        (Store, "dispatch", dispatch),
        (Store, "claim_runs", claim_runs),
        (Store, "finish_runs", finish_runs),
        (Store, "upsert_job", upsert_job),
        (Store, "deschedule_job", deschedule_job),
        (Store, "recover_run", recover_run),
        (RunBook, "ended", ended),
        (proof_jobs, "file_tracked", target),
    ):
        patch.object(owner, name, new).start()  # for the life of this process


def _listen(crash: _Crash, sched: JobScheduler) -> None:
    """Follow the statements and commits of the scheduler's engine for `crash.point`."""

    def after_execute(
        conn: object, cursor: object, statement: str, params: object, context: object, many: bool
    ) -> None:
        active = crash.active()
        if not active:
            return
        sql = statement.lstrip().upper()
        if active[-1] == "claim" and sql.replace("%S", "?").startswith(_CLAIM_WRITE_BACK):
            crash.fire("claim-after-update")
        elif active[-1] == "claim" and sql.startswith("INSERT INTO PERSCHED_RUNS"):
            crash.tx()["claim"] = True  # this transaction won a claim
        elif active[-1] == "finish" and sql.startswith("UPDATE PERSCHED_JOBS"):
            crash.fire("completion-after-update", run_ids=crash.tx().get("finish"))
        elif active[-1] == "recover" and sql.startswith("UPDATE PERSCHED_RUNS"):
            crash.fire("recover-after-update", run_id=crash.tx().get("recover"))

    def on_commit(conn: object) -> None:
        tx = crash.tx()
        if "claim" in tx:
            crash.fire("claim-before-commit")
        if "finish" in tx:
            crash.fire("completion-before-commit", run_ids=tx["finish"])
        if "upsert" in tx:
            crash.fire("upsert-before-commit")
        if "deschedule" in tx:
            crash.fire("deschedule-before-commit")
        if "recover" in tx:
            crash.fire("recover-before-commit", run_id=tx["recover"])
        tx.clear()

    def on_rollback(conn: object) -> None:
        crash.tx().clear()

    engine = store_of(sched).engine
    event.listen(engine, "after_cursor_execute", after_execute)
    event.listen(engine, "commit", on_commit)
    event.listen(engine, "rollback", on_rollback)


def _wait_for_starts(path: Path, count: int, deadline: float) -> None:
    """Poll until `path` holds `count` callable starts (bounded)."""
    end = time.monotonic() + deadline
    while len(proof_jobs.read_file_starts(str(path))) < count:
        if time.monotonic() > end:
            os._exit(EXIT_DEADLINE)
        time.sleep(0.01)  # polling with a deadline


def _random_workload(sched: JobScheduler, ops: OpLog, starts: Path, seed: int, deadline: float) -> None:
    """Replace "a", deschedule and re-schedule "c", at a seeded random pace, until killed.

    Each call is logged before it starts too: the kill may land after its commit and
    before its return is logged (the history then holds it as in flight).
    """
    rng = random.Random(seed)
    end = time.monotonic() + deadline
    pace = threading.Event()
    while time.monotonic() < end:
        pace.wait(rng.uniform(0.01, 0.1))  # workload pacing, not synchronisation
        choice = rng.random()
        if choice < 0.4:
            interval = rng.choice((0.05, 0.06))
            invoked = ops.invoked("schedule", "a", interval)
            job = sched.schedule("a", TARGET, interval, args=(str(starts),))
            ops.returned("schedule", "a", invoked, job.generation, interval)
        elif choice < 0.7:
            invoked = ops.invoked("deschedule", "c")
            removed = sched.deschedule("c")
            ops.returned("deschedule", "c", invoked, removed)
        else:
            invoked = ops.invoked("schedule", "c", JOBS["c"])
            job = sched.schedule("c", TARGET, JOBS["c"], args=(str(starts),))
            ops.returned("schedule", "c", invoked, job.generation, JOBS["c"])
    os._exit(EXIT_DEADLINE)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the scheduler until killed (or until the deadline)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--starts", required=True)
    parser.add_argument("--ops", required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--point", required=True, choices=[*POINTS, "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--pickup", type=float, default=0.2)
    parser.add_argument("--deadline", type=float, default=60.0)
    args = parser.parse_args(argv)
    starts, ops, marker = Path(args.starts), OpLog(Path(args.ops)), Path(args.marker)

    crash = _Crash(args.point, marker, args.deadline)
    if args.point != "random":
        _install(crash)
    sched = JobScheduler(
        f"sqlite:///{args.db}",
        workers=4,
        instance_id=f"child-{os.getpid()}",
        lease_seconds=args.lease,
        heartbeat_seconds=args.heartbeat,
        pickup_seconds=args.pickup,
        keep_runs=None,  # the checker needs every run
    )
    if args.point != "random":
        _listen(crash, sched)

    def schedule(job_id: str, interval: float, start_in: float | None = None) -> int:
        invoked = ops.invoked("schedule", job_id, interval)
        job = sched.schedule(job_id, TARGET, interval, args=(str(starts),), start_in=start_in)
        ops.returned("schedule", job_id, invoked, job.generation, interval)
        return job.generation

    for job_id, interval in JOBS.items():
        schedule(job_id, interval, start_in=0.0)
    if args.point in RECOVER_POINTS:
        # A dead instance's run: claimed in the store before start, never renewed.
        generation = schedule(RECOVER_JOB, 0.2, start_in=0.0)
        job = sched.get_job(RECOVER_JOB)
        assert job is not None
        due = from_datetime(job.next_run_at)
        lease = Micros(micros(args.lease))
        claim = claim_one(store_of(sched), RECOVER_JOB, generation, due, now_of(sched), "dead", lease)
        assert isinstance(claim, Claim), claim
    sched.start()

    if args.point == "random":
        _wait_for_starts(starts, 1, args.deadline)
        write_marker(marker, {"point": "ready", "mono": time.monotonic()})
        _random_workload(sched, ops, starts, args.seed, args.deadline)
    if args.point in OP_POINTS:
        _wait_for_starts(starts, HISTORY_BEFORE_ARMING, args.deadline)
        if args.point.startswith("upsert-"):
            crash.pending = {"kind": "schedule", "job_id": "a", "invoked": time.monotonic()}
            crash.pending["interval"] = REPLACED_INTERVAL
            crash.armed.set()
            sched.schedule("a", TARGET, REPLACED_INTERVAL, args=(str(starts),))
        else:
            crash.pending = {"kind": "deschedule", "job_id": "b", "invoked": time.monotonic()}
            crash.armed.set()
            sched.deschedule("b")
        os._exit(EXIT_MISSED)  # the call returned: the point was never reached
    _wait_for_starts(starts, HISTORY_BEFORE_ARMING, args.deadline)
    crash.armed.set()
    threading.Event().wait(args.deadline)  # until SIGKILL
    os._exit(EXIT_DEADLINE)


if __name__ == "__main__":
    main()
