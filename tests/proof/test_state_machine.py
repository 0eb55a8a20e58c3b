"""Stateful property test: random schedule / replace / deschedule / advance / restart vs a reference model.

The scheduler runs on a `FakeClock` and a SQLite file that survives the
restarts. Intervals, start delays and clock steps are multiples of 1/4 s, so
every instant is exact in binary floating point and the fixed-rate grid is
exact: after each step the model says which jobs are scheduled (generation,
next_run_at) and which (job, generation, slot) runs should have happened,
and the database must say the same. Every step waits (bounded) until the
runs it made due have finished, so the comparison is exact, not eventual.
The recorded calls and runs also go through the history checker (times: the
FakeClock's monotonic frame).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from persched import JobScheduler
from persched._model.instant import micros
from persched.errors import SchedulerStateError
from persched.testing import FakeClock
from tests.proof._settings import fuzz_settings
from tests.support.helpers import EPOCH, TIMEOUT, sql, wait_until
from tests.support.history import History, assert_consistent, runs_from_db, ts

JOB_IDS = ("a", "b", "c")
# (interval, argument): the definition of a job; two equal ones are "the same definition".
DEFINITIONS = ((1.0, "x"), (2.0, "x"), (1.0, "y"), (0.5, "z"), (3.0, "x"))
START_IN = (None, 0.0, 0.25, 1.0, 3.0)
STEPS = (0.25, 0.5, 1.0, 2.0, 3.0, 10.0, 1000.0)
TARGET = "tests.support.proof_jobs:noop"


@dataclass
class ModelJob:
    """What the spec says about one active job."""

    definition: tuple[float, str]
    generation: int
    first: float
    next_run: float

    @property
    def interval(self) -> float:
        return self.definition[0]


class Model:
    """The reference model of docs/reference/behaviour.md on an exact grid."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.jobs: dict[str, ModelJob] = {}
        self.last_generation: dict[str, int] = {}
        self.runs: list[tuple[str, int, float]] = []

    def schedule(self, job_id: str, definition: tuple[float, str], start_in: float | None) -> int:
        job = self.jobs.get(job_id)
        if job is not None and job.definition == definition:
            return job.generation  # unchanged: same generation, same next run
        generation = self.last_generation.get(job_id, 0) + 1
        self.last_generation[job_id] = generation
        first = self.now + (definition[0] if start_in is None else start_in)
        self.jobs[job_id] = ModelJob(definition, generation, first, first)
        return generation

    def deschedule(self, job_id: str) -> bool:
        return self.jobs.pop(job_id, None) is not None

    def dispatch(self) -> None:
        """Every due job runs once, for the latest slot at or before now; the next slot is after now."""
        for job_id, job in self.jobs.items():
            if job.next_run <= self.now:
                k = math.floor((self.now - job.first) / job.interval)
                slot = max(job.first + k * job.interval, job.next_run)
                self.runs.append((job_id, job.generation, slot))
                job.next_run = slot + job.interval


class SchedulerMachine(RuleBasedStateMachine):
    """persched against `Model`, one SQLite file per example."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="persched-sm-")
        self.path = str(Path(self.dir) / "sm.db")
        self.url = f"sqlite:///{self.path}"
        self.clock = FakeClock(start=EPOCH)
        self.model = Model(EPOCH)
        self.history = History(now=self.clock.monotonic)
        self.sched = self._new_scheduler()

    def _new_scheduler(self) -> JobScheduler:
        sched = JobScheduler(self.url, workers=2, clock=self.clock, synchronous="NORMAL")
        sched.start()
        return sched

    def _settle(self) -> None:
        self.model.dispatch()
        expected = len(self.model.runs)

        def done() -> bool:
            rows = sql(self.url, "SELECT count(*), count(outcome) FROM persched_runs")
            return bool(rows[0][0] >= expected and rows[0][0] == rows[0][1])

        wait_until(done, message=f"{expected} finished runs")

    @rule(job_id=st.sampled_from(JOB_IDS), definition=st.sampled_from(DEFINITIONS), start_in=st.sampled_from(START_IN))
    def schedule(self, job_id: str, definition: tuple[float, str], start_in: float | None) -> None:
        interval, arg = definition
        generation = self.history.schedule(
            lambda: self.sched.schedule(job_id, TARGET, interval, args=(arg,), start_in=start_in), job_id, interval
        )
        assert generation == self.model.schedule(job_id, definition, start_in)
        self._settle()

    @rule(job_id=st.sampled_from(JOB_IDS))
    def deschedule(self, job_id: str) -> None:
        removed = self.history.deschedule(lambda: self.sched.deschedule(job_id), job_id)
        assert removed == self.model.deschedule(job_id)
        self._settle()

    @rule(seconds=st.sampled_from(STEPS))
    def advance(self, seconds: float) -> None:
        self.model.now += seconds
        self.clock.advance(seconds)
        self._settle()

    @rule()
    def restart(self) -> None:
        self.sched.shutdown(wait=True, timeout=TIMEOUT)
        self.sched = self._new_scheduler()
        self._settle()

    @invariant()
    def store_matches_model(self) -> None:
        jobs = {job.job_id: job for job in self.sched.jobs()}
        assert set(jobs) == set(self.model.jobs), (sorted(jobs), sorted(self.model.jobs))
        for job_id, expected in self.model.jobs.items():
            job = jobs[job_id]
            assert job.generation == expected.generation, (job_id, job.generation, expected)
            assert job.next_run_at.timestamp() == expected.next_run, (job_id, job.next_run_at, expected)
            assert job.state.value == "scheduled"
        rows = sql(self.url, "SELECT job_id, generation, scheduled_for, outcome FROM persched_runs ORDER BY run_id")
        got = sorted((r[0], r[1], ts(r[2])) for r in rows)
        assert got == sorted(self.model.runs), (got, sorted(self.model.runs))
        assert all(r[3] == "ok" for r in rows), rows

    def teardown(self) -> None:
        try:
            with contextlib.suppress(SchedulerStateError):
                self.sched.shutdown(wait=True, timeout=TIMEOUT)
            ops, _ = self.history.snapshot()
            runs = runs_from_db(self.path, micros(EPOCH) - 1_000_000_000)  # FakeClock: wall - monotonic offset
            assert_consistent(ops, runs, [], starts_complete=False)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


SchedulerMachine.TestCase.settings = fuzz_settings(25, 400, stateful_step_count=15)
TestSchedulerMachine = SchedulerMachine.TestCase
