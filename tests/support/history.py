"""A Jepsen-style history of schedule/deschedule calls and runs, and its checker.

Recording
---------
`History.call()` records one public operation: its kind (``schedule`` or
``deschedule``), the job, the invocation and response times and the value it
returned (for ``schedule`` the returned generation, for ``deschedule`` the
bool). Runs are recorded twice: the *claim* as persched stored it
(`RunRow`, read from ``persched_runs`` after the fact) and the *start* and
*end* as the callable saw them (`Start`, recorded by
`tests.support.proof_jobs.tracked`).

Time
----
Every time in a history is in ONE frame, chosen by the test and passed to
`History(now=...)`: real ``time.monotonic()`` for the threaded stress runs
(the default), or a `FakeClock`'s ``monotonic()`` for deterministic runs.
The database stores ``started_at`` as wall-clock epoch seconds in the
scheduler's `Timebase` frame, which is ``clock.monotonic() + offset``;
`RunRow.claimed` is converted back to the monotonic frame with the offset
(`runs_from_db(..., offset_us=sched._timebase._offset)`), so claims and calls
compare directly. Only one scheduler's frame can be used per history (a
restarted scheduler on a FakeClock keeps the same offset; across processes
the checker uses only the frame-free rules, see `check(..., timed=False)`).

Rules checked
-----------------------------------
R1 no start after death: a generation is *dead* once a ``deschedule`` of its
   job, invoked after that generation's ``schedule`` returned, has returned,
   or once a ``schedule`` that returned a higher generation has returned.
   A run of a dead generation must have been claimed before the killing call
   returned, and at most one run per (job, generation) may start its
   callable after that return (the claim that won the race).
R2 no overlap: two runs of one (job, generation) never overlap, neither as
   stored (claim .. finish) nor as seen by the callable (start .. end).
R3 once per slot and attempt: no (job, generation, scheduled_for, attempt) of the
   grid is claimed twice (run-now runs are off the grid: they may share an instant).
R4 liveness: a job whose last operation left it scheduled, and that stayed
   so for `live_after` seconds before the end of the history, has a claim of
   its final generation after that schedule returned.
R5 bookkeeping: every callable start matches a stored claim of the same
   run_id/job/generation/slot/attempt, started after the claim; no run is left open
   (outcome NULL) at the end of a quiesced history; outcomes are valid.
R6 attempts (retries inside a slot): a run-now run is attempt 1; attempt k+1
   (k >= 1) of a slot is claimed only if attempt k of that slot was claimed, had
   ended (outcome set; when `timed`, finished before k+1 was claimed) and failed
   (outcome "error" or "lost"); as seen by the callables, attempt k+1 starts
   after attempt k's callable ended.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final

from tests.support.helpers import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

__all__ = [
    "History",
    "Op",
    "OpLog",
    "RunRow",
    "RunsReader",
    "Start",
    "assert_consistent",
    "check",
    "describe",
    "drive",
    "runs_from_db",
    "runs_from_url",
    "ts",
    "wait_until_live",
]

OUTCOMES: Final = frozenset({"ok", "error", "lost", "stopped", None})
RETRIED: Final = frozenset({"error", "lost"})  # the outcomes a later attempt of the slot may follow


@dataclass(frozen=True)
class Op:
    """One public call: ``schedule`` (result: generation) or ``deschedule`` (result: bool)."""

    kind: str
    job_id: str
    invoked: float
    returned: float
    result: int | bool | None  # None: the call raised, or was cut short (its effect unknown)
    interval: float | None = None


@dataclass(frozen=True)
class RunRow:
    """One row of ``persched_runs``, times in the history's frame."""

    run_id: int
    job_id: str
    generation: int
    scheduled_for: float  # epoch seconds as stored (identity of the slot)
    claimed: float  # started_at, converted to the history's frame
    finished: float | None
    outcome: str | None
    instance_id: str | None = None
    attempt: int = 1
    run_now: bool = False


@dataclass(frozen=True)
class Start:
    """A run as its callable saw it."""

    run_id: int
    job_id: str
    generation: int
    scheduled_for: float
    start: float
    end: float | None
    attempt: int = 1


@dataclass
class History:
    """Thread-safe recorder of operations and callable starts."""

    now: Callable[[], float] = time.monotonic
    ops: list[Op] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_op(self, op: Op) -> None:
        """Append a finished operation."""
        with self._lock:
            self.ops.append(op)

    def schedule(self, call: Callable[[], object], job_id: str, interval: float | None = None) -> int | None:
        """Run `call` (a schedule() returning a Job) and record it; return the generation (None if it raised)."""
        invoked = self.now()
        generation: int | None = None
        try:
            job = call()
            generation = int(getattr(job, "generation"))  # noqa: B009 - any Job-like object
        finally:
            self.record_op(Op("schedule", job_id, invoked, self.now(), generation, interval))
        return generation

    def deschedule(self, call: Callable[[], bool], job_id: str) -> bool | None:
        """Run `call` (a deschedule()) and record it with its bool."""
        invoked = self.now()
        removed: bool | None = None
        try:
            removed = bool(call())
        finally:
            self.record_op(Op("deschedule", job_id, invoked, self.now(), removed))
        return removed

    def record_start(self, start: Start) -> None:
        """Append a callable's start/end (called from the worker thread)."""
        with self._lock:
            self.starts.append(start)

    def snapshot(self) -> tuple[list[Op], list[Start]]:
        """Copies of the operations and starts recorded so far."""
        with self._lock:
            return list(self.ops), list(self.starts)


@dataclass(frozen=True)
class OpLog:
    """Public calls of another process, one JSON line each, written so that a SIGKILL loses none.

    `invoked` writes a line before the call and `returned` another after it: a
    call that a kill cut short (it may have committed) stays in the history as
    in flight until the kill, with an unknown result, so that no rule judges a
    generation it may have replaced.
    """

    path: Path

    def invoked(self, kind: str, job_id: str, interval: float | None = None) -> float:
        """Record that a call starts now; return its invocation time."""
        at = time.monotonic()
        self._write({"kind": kind, "job_id": job_id, "invoked": at, "returned": None, "interval": interval})
        return at

    def returned(
        self, kind: str, job_id: str, invoked: float, result: int | bool, interval: float | None = None
    ) -> None:
        """Record that the call invoked at `invoked` returned `result` now."""
        line = {"kind": kind, "job_id": job_id, "invoked": invoked, "returned": time.monotonic(), "result": result}
        self._write(line | {"interval": interval})

    def read(self, cut_at: float) -> list[Op]:
        """The calls, those still in flight ending at `cut_at` (the kill) with an unknown result."""
        if not self.path.exists():
            return []
        ops: list[Op] = []
        in_flight: dict[tuple[str, str, float], dict[str, Any]] = {}
        for line in self.path.read_text().splitlines():
            d = json.loads(line)
            key = (d["kind"], d["job_id"], d["invoked"])
            if d["returned"] is None:
                in_flight[key] = d
                continue
            in_flight.pop(key, None)
            ops.append(Op(d["kind"], d["job_id"], d["invoked"], d["returned"], d["result"], d["interval"]))
        ops += [Op(d["kind"], d["job_id"], d["invoked"], cut_at, None, d["interval"]) for d in in_flight.values()]
        return ops

    def _write(self, line: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())


def ts(value: object) -> float:
    """A stored instant (datetime, or SQLite text; naive means UTC) as epoch seconds."""
    dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def runs_from_db(path: str, offset_us: int = 0) -> list[RunRow]:
    """Read every row of ``persched_runs`` in the SQLite file `path`.

    `offset_us` (microseconds: a scheduler's ``_timebase._offset``) is subtracted from
    stored wall instants to land in the history's monotonic frame (seconds).
    """
    with closing(sqlite3.connect(path, timeout=10.0)) as conn:
        rows = conn.execute(f"SELECT {_RUN_COLUMNS} FROM persched_runs ORDER BY run_id").fetchall()  # noqa: S608
    return [_run_row(r, offset_us) for r in rows]


def runs_from_url(url: str, offset_us: int = 0) -> list[RunRow]:
    """`runs_from_db` of any engine's database, by its SQLAlchemy URL."""
    reader = RunsReader(url, offset_us)
    try:
        return reader.runs()
    finally:
        reader.close()


class RunsReader:
    """`runs_from_url`, again and again through one engine: for polling, where a new connection to a
    server each time would cost a handshake of the server's CPU the scheduler under test needs."""

    def __init__(self, url: str, offset_us: int = 0) -> None:
        from sqlalchemy import create_engine  # only where a server's history is read

        self._engine = create_engine(url)
        self._offset_us = offset_us

    def runs(self) -> list[RunRow]:
        """Every row of ``persched_runs``, oldest first."""
        from sqlalchemy import text

        with self._engine.connect() as conn:
            rows = conn.execute(text(f"SELECT {_RUN_COLUMNS} FROM persched_runs ORDER BY run_id")).fetchall()  # noqa: S608
        return [_run_row(tuple(r), self._offset_us) for r in rows]

    def close(self) -> None:
        """Release the engine."""
        self._engine.dispose()


_RUN_COLUMNS: Final = (
    "run_id, job_id, generation, scheduled_for, started_at, finished_at, outcome, instance_id, attempt, run_now"
)


def _run_row(r: tuple[Any, ...], offset_us: int) -> RunRow:
    offset = offset_us / 1_000_000
    return RunRow(
        run_id=int(r[0]),
        job_id=str(r[1]),
        generation=int(r[2]),
        scheduled_for=ts(r[3]),
        claimed=ts(r[4]) - offset,
        finished=None if r[5] is None else ts(r[5]) - offset,
        outcome=r[6],
        instance_id=r[7],
        attempt=int(r[8]),
        run_now=bool(r[9]),
    )


def _deaths(ops: Iterable[Op]) -> dict[tuple[str, int], float]:
    """(job, generation) -> the earliest return of a call that killed it (rule R1)."""
    by_job: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_job[op.job_id].append(op)
    deaths: dict[tuple[str, int], float] = {}

    def kill(job_id: str, generation: int, at: float) -> None:
        key = (job_id, generation)
        if key not in deaths or at < deaths[key]:
            deaths[key] = at

    for job_id, job_ops in by_job.items():
        schedules = [o for o in job_ops if o.kind == "schedule" and o.result is not None]
        for op in job_ops:
            if op.kind == "deschedule" and op.result is not None:
                # Every generation whose schedule returned before this call was invoked is
                # gone once it returns (True: it removed it or a later one; False: none active).
                for s in schedules:
                    if s.returned < op.invoked:
                        kill(job_id, int(s.result), op.returned)  # type: ignore[arg-type]  # not None: filtered above
            elif op.kind == "schedule" and op.result is not None:
                # Generations are never reused: a returned generation g kills every g' < g.
                for g in range(1, int(op.result)):
                    kill(job_id, g, op.returned)
    return deaths


def check(
    ops: list[Op],
    runs: list[RunRow],
    starts: list[Start],
    *,
    end: float | None = None,
    live_after: float | None = None,
    timed: bool = True,
    quiesced: bool = True,
    starts_complete: bool = True,
) -> list[str]:
    """Return every violation of rules R1-R5 (empty: the history is consistent).

    Args:
        ops: The public calls.
        runs: ``persched_runs`` rows (times in the history's frame when `timed`).
        starts: Callable starts/ends.
        end: The time the history ended (for R4).
        live_after: R4 applies to jobs scheduled at least this long before `end`.
        timed: False when claim times are not in the history's frame (several
            processes): R1 then compares callable starts only.
        quiesced: Every run must have an outcome (no run in flight at the end).
        starts_complete: Every stored 'ok' run must have a recorded callable start.
    """
    problems: list[str] = []
    deaths = _deaths(ops)
    starts_by_run: dict[int, list[Start]] = defaultdict(list)
    for s in starts:
        starts_by_run[s.run_id].append(s)
    runs_by_id = {r.run_id: r for r in runs}

    # R5 bookkeeping.
    for r in runs:
        if r.outcome not in OUTCOMES:
            problems.append(f"R5 run {r.run_id} of {r.job_id}: bad outcome {r.outcome!r}")
        if quiesced and r.outcome is None:
            problems.append(f"R5 run {r.run_id} of {r.job_id} g{r.generation} still open at the end")
        if r.finished is not None and r.finished < r.claimed - 1e-6:
            problems.append(f"R5 run {r.run_id} of {r.job_id}: finished {r.finished} before claimed {r.claimed}")
        if starts_complete and r.outcome == "ok" and r.run_id not in starts_by_run:
            problems.append(f"R5 run {r.run_id} of {r.job_id} g{r.generation} is 'ok' but its callable never started")
    for run_id, ss in starts_by_run.items():
        if len(ss) > 1:
            problems.append(f"R5 run {run_id}: callable started {len(ss)} times")
        stored = runs_by_id.get(run_id)
        if stored is None:
            problems.append(f"R5 callable start of run {run_id} ({ss[0].job_id}) has no stored claim")
            continue
        s = ss[0]
        if (s.job_id, s.generation, s.attempt) != (stored.job_id, stored.generation, stored.attempt) or abs(
            s.scheduled_for - stored.scheduled_for
        ) > 1e-6:
            problems.append(f"R5 run {run_id}: callable saw {s} but the store has {stored}")
        if timed and s.start < stored.claimed - 1e-3:
            problems.append(f"R5 run {run_id}: callable started at {s.start} before its claim at {stored.claimed}")

    # R3 once per slot and attempt (run-now runs are off the grid).
    seen: dict[tuple[str, int, float, int], int] = {}
    for r in runs:
        if r.run_now:
            continue
        slot_key = (r.job_id, r.generation, round(r.scheduled_for, 6), r.attempt)
        if slot_key in seen:
            problems.append(
                f"R3 slot {slot_key[:3]} claimed twice (attempt {r.attempt}): runs {seen[slot_key]} and {r.run_id}"
            )
        else:
            seen[slot_key] = r.run_id

    problems.extend(_attempt_problems(runs, starts, timed))

    # R2 no overlap, as stored and as seen by the callable.
    stored_by_gen: dict[tuple[str, int], list[RunRow]] = defaultdict(list)
    for r in runs:
        stored_by_gen[(r.job_id, r.generation)].append(r)
    for key, rs in stored_by_gen.items():
        rs.sort(key=lambda r: r.run_id)
        for a, b in pairwise(rs):
            if a.outcome is None:
                problems.append(f"R2 {key}: run {b.run_id} claimed while run {a.run_id} was still open")
            elif timed and a.finished is not None and b.claimed < a.finished - 1e-6:
                problems.append(f"R2 {key}: run {b.run_id} claimed at {b.claimed} before run {a.run_id} finished")
    seen_by_gen: dict[tuple[str, int], list[Start]] = defaultdict(list)
    for s in starts:
        seen_by_gen[(s.job_id, s.generation)].append(s)
    for key, ss in seen_by_gen.items():
        ss.sort(key=lambda s: s.start)
        for sa, sb in pairwise(ss):
            if sa.end is None or sb.start < sa.end:
                problems.append(f"R2 {key}: callable of run {sb.run_id} started while run {sa.run_id} was running")

    # R1 no start after death.
    for key, died in deaths.items():
        late = [s for s in seen_by_gen.get(key, []) if s.start > died]
        if len(late) > 1:
            problems.append(f"R1 {key}: {len(late)} runs started after it died at {died}: {[s.run_id for s in late]}")
        if timed:
            problems.extend(
                f"R1 {key}: run {r.run_id} claimed at {r.claimed}, after it died at {died}"
                for r in stored_by_gen.get(key, [])
                if r.claimed > died
            )

    # R4 liveness.
    if end is not None and live_after is not None:
        last: dict[str, Op] = {}
        for op in sorted(ops, key=lambda o: o.returned):
            if op.result is not None:
                last[op.job_id] = op
        for job_id, op in last.items():
            if op.kind != "schedule" or op.returned > end - live_after:
                continue
            # Only when it did not overlap another call of the job (else its order is unknown).
            if any(o is not op and o.job_id == job_id and o.returned >= op.invoked for o in ops):
                continue
            assert isinstance(op.result, int)
            gen = op.result
            if (job_id, gen) in deaths:
                continue  # a concurrent call killed it after all
            if timed:
                ok = any(r.claimed >= op.invoked for r in stored_by_gen.get((job_id, gen), []))
            else:
                ok = bool(stored_by_gen.get((job_id, gen)))
            if not ok:
                problems.append(f"R4 {job_id} g{gen} stayed scheduled from {op.returned} to {end} but never ran")
    return problems


def _attempt_problems(runs: list[RunRow], starts: list[Start], timed: bool) -> list[str]:
    """Rule R6 (module docstring): each later attempt of a slot follows a failed, ended one."""
    problems: list[str] = []
    by_slot: dict[tuple[str, int, float], dict[int, RunRow]] = defaultdict(dict)
    for r in runs:
        if r.run_now:
            if r.attempt != 1:
                problems.append(f"R6 run {r.run_id} of {r.job_id}: a run-now run is attempt {r.attempt}, not 1")
            continue
        if r.attempt < 1:
            problems.append(f"R6 run {r.run_id} of {r.job_id}: attempt {r.attempt}")
            continue
        by_slot[(r.job_id, r.generation, round(r.scheduled_for, 6))].setdefault(r.attempt, r)
    for key, attempts in by_slot.items():
        for k, later in sorted(attempts.items()):
            if k == 1:
                continue
            before = attempts.get(k - 1)
            what = f"R6 {key} attempt {k} (run {later.run_id})"
            if before is None:
                problems.append(f"{what} was claimed with no attempt {k - 1} of its slot")
            elif before.outcome is None or before.finished is None:
                problems.append(f"{what} was claimed while attempt {k - 1} (run {before.run_id}) had not ended")
            elif before.outcome not in RETRIED:
                problems.append(f"{what} follows attempt {k - 1} (run {before.run_id}) that ended {before.outcome!r}")
            elif before.run_id > later.run_id or (timed and later.claimed < before.finished - 1e-6):
                problems.append(f"{what} was claimed before attempt {k - 1} (run {before.run_id}) ended")
    # As the callables saw them: attempt k+1's callable starts after attempt k's ended.
    seen: dict[tuple[str, int, float, int], Start] = {}
    for s in starts:
        seen.setdefault((s.job_id, s.generation, round(s.scheduled_for, 6), s.attempt), s)
    for (job_id, generation, slot, k), s in seen.items():
        before_start = seen.get((job_id, generation, slot, k - 1))
        if before_start is not None and (before_start.end is None or s.start < before_start.end):
            problems.append(
                f"R6 ({job_id!r}, {generation}, {slot}) attempt {k}: callable of run {s.run_id} started "
                f"before attempt {k - 1}'s (run {before_start.run_id}) ended"
            )
    return problems


def drive(count: int, driver: Callable[[int, threading.Barrier], None], timeout: float) -> None:
    """Run ``driver(i, barrier)`` on `count` threads that start together at `barrier`; fail unless
    every one ended within `timeout` real seconds, and raise here the first error a driver raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            driver(i, barrier)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"test-driver-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a driver thread hung"
    if errors:
        raise errors[0]


def wait_until_live(history: History, runs: Callable[[], list[RunRow]], timeout: float) -> None:
    """Wait until the checker's own R4 holds: every job left scheduled claimed its final generation
    after that schedule was invoked (an unchanged re-schedule returns a generation that may have
    run before it; waiting for any run of it would end the history too early)."""

    def live() -> bool:
        so_far, started = history.snapshot()
        problems = check(so_far, runs(), started, end=time.monotonic(), live_after=0.0)
        return not [problem for problem in problems if problem.startswith("R4")]

    wait_until(live, timeout=timeout, message="every job left scheduled ran its final generation")


def assert_consistent(ops: list[Op], runs: list[RunRow], starts: list[Start], **options: Any) -> None:  # noqa: ANN401
    """`check` the history (with `options`); on a violation, fail with the problems and the history judged."""
    problems = check(ops, runs, starts, **options)
    if problems:
        raise AssertionError(describe(problems, ops, runs, starts))


def describe(problems: list[str], ops: list[Op], runs: list[RunRow], starts: list[Start], most: int = 200) -> str:
    """The problems, then the history of each job they name (all jobs if they name none): its
    calls, stored runs and callable starts, each in time order, at most `most` lines of each."""
    jobs = {o.job_id for o in ops} | {r.job_id for r in runs} | {s.job_id for s in starts}
    text = "\n".join(problems)
    named = {j for j in jobs if re.search(rf"(?<![\w-]){re.escape(j)}(?![\w-])", text)} or jobs
    lines = [f"{len(problems)} problems:", *problems[:most]]

    def section(title: str, rows: list[str]) -> None:
        lines.append(f"  {title} ({len(rows)}):")
        lines.extend(f"    {row}" for row in rows[:most])
        if len(rows) > most:
            lines.append(f"    ... {len(rows) - most} more")

    for job_id in sorted(named):
        lines.append(f"history of {job_id}:")
        section("calls", [repr(o) for o in sorted(ops, key=lambda o: o.invoked) if o.job_id == job_id])
        section("stored runs", [repr(r) for r in sorted(runs, key=lambda r: r.run_id) if r.job_id == job_id])
        section("callable starts", [repr(x) for x in sorted(starts, key=lambda x: x.start) if x.job_id == job_id])
    return "\n".join(lines)
