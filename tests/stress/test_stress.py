"""Stress: many threads schedule, replace and deschedule a handful of ids on a
real clock with intervals of a few milliseconds, while the scheduler runs them.

The budget is small by default and scales with ``PERSCHED_STRESS_SCALE``; the
seed is named in a failure and can be replayed with ``PERSCHED_SEED``.
Invariants are read from ``persched_runs`` after a clean shutdown.

What can be asserted soundly
----------------------------
Every time below is read from the scheduler's own `Timebase`, the frame in
which the store records ``started_at`` (a claim's ``now``, read *before* its
transaction commits).

- A generation `g` of a job ends at the commit of a deschedule or of a
  replacing schedule. We do not know which call that was, but we know calls
  that returned after it: any call that returned a generation > g; and any
  deschedule, or schedule with another definition, that *started* after a
  call returning g had returned (at its commit g was current or already
  over). The earliest such return bounds the end of g from above.
- A run of g was claimed before g ended (the claim is conditional on the
  generation and on state 'scheduled'), and its ``started_at`` was read before
  that claim committed. So every run of g has ``started_at`` <= that bound.
  The callable itself may start later (the contract allows the one run whose claim
  committed first to start just after deschedule returns), which is why the
  check is on ``started_at`` and not on when the callable ran.
- Likewise a run of g has ``started_at`` >= the start of the earliest call
  that returned g (the row did not exist before that call began).
- Runs of one (job_id, generation) never overlap: the next claim needs the
  row back in 'scheduled', which only the previous run's completion does,
  and that completion's ``finished_at`` is read before it commits.
- (job_id, generation, scheduled_for) is unique.
- After a clean shutdown no run is open and no job row is 'running'.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from persched._model.instant import seconds
from persched._store import db as _db
from persched._store.schema import jobs as jobs_table
from persched._store.schema import runs as runs_table
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.seams import now_of

if TYPE_CHECKING:
    from persched import JobScheduler
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.stress

EPS = 2e-6  # the store keeps microseconds; both sides may be rounded
IDS = [f"job{i}" for i in range(5)]
DEFINITIONS: list[tuple[str, tuple[Any, ...], float]] = [
    ("tests.support.race_jobs:work", (0.001,), 0.004),
    ("tests.support.race_jobs:work", (0.0005,), 0.004),
    ("tests.support.race_jobs:noop", (), 0.006),
    ("tests.support.race_jobs:noop", (1,), 0.003),
]


def scale() -> float:
    return float(os.environ.get("PERSCHED_STRESS_SCALE", "1"))


@dataclass(frozen=True)
class Op:
    kind: str  # "schedule" | "deschedule"
    job_id: str
    definition: int | None  # index into DEFINITIONS
    started: float
    returned: float
    generation: int | None  # schedule: the generation it returned
    removed: bool | None  # deschedule: its result


@dataclass(frozen=True)
class RunRow:
    job_id: str
    generation: int
    scheduled_for: float
    started_at: float
    finished_at: float | None
    outcome: str | None


def hammer(sched: JobScheduler, rng_seed: int, threads: int = 8) -> list[Op]:
    """`threads` threads schedule/replace/deschedule IDS at random; return every call."""
    ops_per_thread = max(1, int(30 * scale()))

    def now() -> float:  # the scheduler's frame, in the seconds the rows are read in
        return seconds(now_of(sched))

    ops: list[Op] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads, timeout=TIMEOUT)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        rng = random.Random(rng_seed * 1000 + index)
        mine: list[Op] = []
        try:
            barrier.wait()
            for _ in range(ops_per_thread):
                job_id = rng.choice(IDS)
                if rng.random() < 0.8:
                    # Mostly re-declarations (unchanged), sometimes a replacement.
                    d = rng.choices(range(len(DEFINITIONS)), weights=[6, 1, 1, 1])[0]
                    target, args, interval = DEFINITIONS[d]
                    start_in = rng.choice([None, 0.0, 0.001])
                    started = now()
                    job = sched.schedule(job_id, target, interval, args=args, start_in=start_in)
                    mine.append(Op("schedule", job_id, d, started, now(), job.generation, None))
                else:
                    started = now()
                    removed = sched.deschedule(job_id)
                    mine.append(Op("deschedule", job_id, None, started, now(), None, removed))
                # Pacing (not synchronisation): let some runs happen between changes.
                time.sleep(rng.uniform(0, 0.02))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        with lock:
            ops.extend(mine)

    pool = [threading.Thread(target=worker, args=(i,), name=f"stress-{i}") for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(TIMEOUT * 6)
    assert not any(t.is_alive() for t in pool), "a stress thread hung"
    assert errors == []
    return ops


def read_runs(url: str) -> tuple[list[RunRow], list[tuple[str, str]]]:
    """Every run, and every job's (job_id, state), read with a fresh engine."""
    engine = _db.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = [
                RunRow(
                    r.job_id,
                    r.generation,
                    r.scheduled_for.timestamp(),
                    r.started_at.timestamp(),
                    None if r.finished_at is None else r.finished_at.timestamp(),
                    r.outcome,
                )
                for r in conn.execute(select(runs_table))
            ]
            states = [(r.job_id, r.state) for r in conn.execute(select(jobs_table.c.job_id, jobs_table.c.state))]
    finally:
        engine.dispose()
    return rows, states


def check_invariants(ops: list[Op], rows: list[RunRow], states: list[tuple[str, str]]) -> None:
    # Clean shutdown: nothing open, nothing lost, nothing 'running'.
    assert [r for r in rows if r.outcome is None or r.finished_at is None] == []
    assert [r for r in rows if r.outcome not in ("ok", "error")] == []
    assert [s for s in states if s[1] == "running"] == []
    assert [r for r in rows if r.outcome == "error"] == []

    keys = [(r.job_id, r.generation, r.scheduled_for) for r in rows]
    assert len(keys) == len(set(keys)), "(job_id, generation, scheduled_for) repeated"

    by_gen: dict[tuple[str, int], list[RunRow]] = {}
    for r in rows:
        by_gen.setdefault((r.job_id, r.generation), []).append(r)
    for (job_id, gen), gen_runs in by_gen.items():
        gen_runs.sort(key=lambda r: r.started_at)
        for before, after in itertools.pairwise(gen_runs):
            assert before.finished_at is not None
            assert after.started_at >= before.finished_at - EPS, f"{job_id} gen {gen} overlaps itself"
        for r in gen_runs:
            assert r.finished_at is not None
            assert r.finished_at >= r.started_at - EPS
            assert r.scheduled_for <= r.started_at + EPS, "a slot ran early"

        returned_g = [o for o in ops if o.job_id == job_id and o.kind == "schedule" and o.generation == gen]
        assert returned_g, f"{job_id} generation {gen} ran but no schedule() returned it"
        definitions = {o.definition for o in returned_g}
        assert len(definitions) == 1, f"{job_id} generation {gen} returned for two definitions"
        (definition,) = definitions
        created_by = min(o.returned for o in returned_g)
        earliest_start = min(o.started for o in returned_g)
        ended_by = [
            o.returned
            for o in ops
            if o.job_id == job_id
            and (
                (o.kind == "schedule" and o.generation is not None and o.generation > gen)
                or (o.started >= created_by and o.kind == "deschedule")
                or (o.started >= created_by and o.kind == "schedule" and o.definition != definition)
            )
        ]
        first = gen_runs[0]
        assert first.started_at >= earliest_start - EPS, f"{job_id} gen {gen} ran before it was scheduled"
        if ended_by:
            bound = min(ended_by)
            late = [r for r in gen_runs if r.started_at > bound + EPS]
            assert late == [], f"{job_id} gen {gen} claimed after it ended (bound {bound}): {late}"


def final_generations(sched: JobScheduler) -> dict[str, int]:
    return {job.job_id: job.generation for job in sched.jobs() if job.job_id in IDS}


def run_stress(make_scheduler: SchedulerFactory, url: str, rng_seed: int) -> None:
    sched = make_scheduler(url, real_clock=True, workers=4, start=True)
    ops = hammer(sched, rng_seed)
    # Every job still scheduled at the end has a run after its last change.
    final = final_generations(sched)

    def each_final_generation_ran() -> bool:
        done = {(r.job_id, r.generation) for r in sched.runs(limit=100_000) if r.outcome is not None}
        return all((job_id, gen) in done for job_id, gen in final.items())

    wait_until(each_final_generation_ran, message=f"a run of each final generation {final}")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    rows, states = read_runs(url)
    print(f"stress: {len(ops)} calls, {len(rows)} runs, {len(final)} jobs left")  # noqa: T201 - the budget spent
    assert len({(r.job_id, r.generation) for r in rows}) > 1, "the stress never ran anything"
    check_invariants(ops, rows, states)


@pytest.mark.every_engine
def test_stress_schedule_replace_deschedule(make_scheduler: SchedulerFactory, seed: int) -> None:
    run_stress(make_scheduler, make_scheduler.url, seed)


def test_invariant_checker_rejects_a_run_after_its_generation_ended() -> None:
    """The checker itself can fail: a run claimed after deschedule returned."""
    ops = [
        Op("schedule", "job0", 0, 0.0, 1.0, 1, None),
        Op("deschedule", "job0", None, 2.0, 3.0, None, True),
    ]
    ok = [RunRow("job0", 1, 1.5, 1.5, 1.6, "ok")]
    check_invariants(ops, ok, [("job0", "descheduled")])
    late = [*ok, RunRow("job0", 1, 3.5, 3.5, 3.6, "ok")]
    with pytest.raises(AssertionError, match="claimed after it ended"):
        check_invariants(ops, late, [("job0", "descheduled")])
    overlapping = [*ok, RunRow("job0", 1, 1.55, 1.55, 1.7, "ok")]
    with pytest.raises(AssertionError, match="overlaps itself"):
        check_invariants(ops, overlapping, [("job0", "descheduled")])
    replaced_by = [*ops[:1], Op("schedule", "job0", 1, 1.2, 1.4, 2, None)]
    with pytest.raises(AssertionError, match="claimed after it ended"):
        check_invariants(replaced_by, ok, [("job0", "scheduled")])
