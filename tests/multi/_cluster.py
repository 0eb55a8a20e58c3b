"""Helpers of the multi-instance tests: child processes, once-only checks.

- `Child` / `Cluster`: real scheduler processes (`tests.support.multi_child`)
  that signal readiness through a marker file; every child is killed at
  teardown whatever happened.
- `fetch_runs` + `check_once`: the run history and the side-effect file
  agree, and no slot ran twice (exactly one claim per slot).
- `ME`, `ME_LEASE_SECONDS`, `ME_START`: the in-process scheduler of the ``me`` fixture
  (tests/multi/conftest.py).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import select

from persched import JobScheduler
from persched._engine.membership import owner_among
from persched._store import db as _db
from persched._store.schema import runs as runs_table
from tests.support.helpers import START_TIMEOUT, TIMEOUT, stop_gracefully, wait_started, wait_until
from tests.support.multi_child import EFFECT_TARGET, Effect, read_effects
from tests.support.pressure import CpuPressure

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "ME",
    "ME_LEASE_SECONDS",
    "ME_START",
    "REPO",
    "Child",
    "Cluster",
    "RunReader",
    "RunRow",
    "SlotReport",
    "check_once",
    "deschedule_all",
    "fetch_runs",
    "schedule_jobs",
]

REPO: Final = Path(__file__).resolve().parents[2]
ME: Final = "me:1:aaaaaa"  # the ``me`` fixture's instance id
ME_LEASE_SECONDS: Final = 30.0  # its lease
ME_START: Final = 1_700_000_123.4567  # its FakeClock's start (``clock``): an odd instant
EPS: Final = timedelta(milliseconds=2)


def child_env() -> dict[str, str]:
    """The environment of a child: the repository importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class Child:
    """One `multi_child` process."""

    instance: str
    proc: subprocess.Popen[bytes]
    ready: Path
    log: Path

    def wait_ready(self) -> None:
        """Wait until the child wrote its readiness marker (fail if it died first)."""
        wait_started(self.proc, self.ready.exists, f"{self.instance} ready", self.output)

    def output(self) -> str:
        """The child's stdout and stderr so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def terminate(self) -> int:
        """SIGTERM (graceful shutdown) and wait for the exit code."""
        return stop_gracefully(self.proc, self.instance, self.output)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)


@dataclass
class Cluster:
    """Starts `multi_child` processes on one database; kills leftovers at `close()`."""

    url: str
    tmp: Path
    lease: float = 1.0
    heartbeat: float = 0.2
    pickup: float = 0.2
    # On SQLite the first child to start migrates the file while the others wait for its write lock:
    # on 2 busy cores that takes seconds (3.8 s seen at load 19), past the default 5 s with three starting.
    busy_timeout: float = START_TIMEOUT
    children: list[Child] = field(default_factory=list)
    pressure: CpuPressure = field(default_factory=CpuPressure)  # while the cluster lives (check_once)

    @property
    def effects(self) -> Path:
        """The side-effect file every child's targets append to."""
        return self.tmp / "effects.tsv"

    def spawn(self, instance: str, *extra: str, url: str | None = None) -> Child:
        """Start a child (does not wait for it)."""
        ready = self.tmp / f"{instance}.ready"
        log = self.tmp / f"{instance}.log"
        cmd = [
            sys.executable,
            "-m",
            "tests.support.multi_child",
            "--url",
            self.url if url is None else url,
            "--instance",
            instance,
            "--ready",
            str(ready),
            "--effects",
            str(self.effects),
            "--lease",
            str(self.lease),
            "--heartbeat",
            str(self.heartbeat),
            "--pickup",
            str(self.pickup),
            "--busy-timeout",
            str(self.busy_timeout),
            *extra,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=out, stderr=subprocess.STDOUT)
        child = Child(instance, proc, ready, log)
        self.children.append(child)
        return child

    def start(self, *instances: str, url: str | None = None) -> list[Child]:
        """Start children and wait until every one of them is ready."""
        started = [self.spawn(name, url=url) for name in instances]
        for child in started:
            child.wait_ready()
        return started

    def stop_all(self) -> None:
        """SIGTERM every live child; each must exit 0 (graceful shutdown)."""
        codes = {c.instance: c.terminate() for c in self.children if c.proc.poll() is None}
        bad = {name: code for name, code in codes.items() if code != 0}
        assert not bad, f"children exited with {bad}:\n" + "\n".join(self.children_output(name) for name in bad)

    def children_output(self, instance: str) -> str:
        """The output of child `instance`, for failure messages."""
        for c in self.children:
            if c.instance == instance:
                return f"--- {instance} ---\n{c.output()[-4000:]}"
        return ""

    def close(self) -> None:
        """Kill whatever is still running (teardown)."""
        self.pressure.stop()
        for c in self.children:
            with contextlib.suppress(Exception):
                c.kill()


@contextlib.contextmanager
def cluster(
    url: str,
    tmp: Path,
    *,
    lease: float = 1.0,
    heartbeat: float = 0.2,
    pickup: float = 0.2,
) -> Iterator[Cluster]:
    """A `Cluster` whose children are all killed on exit."""
    c = Cluster(url, tmp, lease=lease, heartbeat=heartbeat, pickup=pickup)
    try:
        yield c
    finally:
        c.close()


def job_owned_by(member: str, members: Sequence[str], prefix: str) -> str:
    """The first job id ``prefix0``, ``prefix1``, ... that `member` owns among `members` (sharing the work)."""
    return next(f"{prefix}{i}" for i in itertools.count() if owner_among(tuple(members), f"{prefix}{i}") == member)


def schedule_jobs(url: str, intervals: dict[str, float], effects: Path, start_in: float) -> dict[str, datetime]:
    """Schedule effect jobs through a scheduler that is never started; return each job's first slot."""
    sched = JobScheduler(url)
    try:
        return {
            job_id: sched.schedule(job_id, EFFECT_TARGET, interval, args=(str(effects),), start_in=start_in).next_run_at
            for job_id, interval in intervals.items()
        }
    finally:
        sched.shutdown()


def deschedule_all(url: str, job_ids: Sequence[str]) -> datetime:
    """Deschedule `job_ids` through a scheduler that is never started; return when the last one committed."""
    sched = JobScheduler(url)
    try:
        for job_id in job_ids:
            sched.deschedule(job_id)
        return datetime.now().astimezone()
    finally:
        sched.shutdown()


@dataclass(frozen=True)
class RunRow:
    """A `persched_runs` row as the checks need it."""

    job_id: str
    generation: int
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    instance_id: str


def fetch_runs(url: str) -> list[RunRow]:
    """Every run recorded in the database, oldest first."""
    reader = RunReader(url)
    try:
        return reader.runs()
    finally:
        reader.close()


class RunReader:
    """Reads `persched_runs` through one engine (for polling)."""

    def __init__(self, url: str) -> None:
        self._engine = _db.make_engine(url)

    def runs(self) -> list[RunRow]:
        """Every run recorded in the database, oldest first."""
        with self._engine.connect() as conn:
            conn.execution_options(persched_readonly=True)  # SQLite: a deferred BEGIN, never the write lock
            rows = conn.execute(select(runs_table).order_by(runs_table.c.run_id)).all()
        return [
            RunRow(r.job_id, r.generation, r.scheduled_for, r.started_at, r.finished_at, r.outcome, r.instance_id)
            for r in rows
        ]

    def close(self) -> None:
        """Release the engine."""
        self._engine.dispose()


def throttled(predicate: Callable[[], bool], every: float = 0.1) -> Callable[[], bool]:
    """`predicate`, evaluated at most once per `every` seconds (False in between): cheap polling of a database."""
    next_at = [0.0]

    def check() -> bool:
        now = time.monotonic()
        if now < next_at[0]:
            return False
        next_at[0] = now + every
        return predicate()

    return check


@dataclass
class SlotReport:
    """What `check_once` measured."""

    runs: int = 0
    slots: int = 0  # grid slots from each job's first slot to its last run
    coalesced: int = 0  # slots that passed without a run of their own
    lost: int = 0
    by_instance: dict[str, int] = field(default_factory=dict)
    starved: float = 0.0  # the share of the test's time in which a task waited for a core
    allowed: float = 0.0  # the share of slots that may coalesce, given `starved`

    def summary(self) -> str:
        """One line for the test output."""
        return (
            f"runs={self.runs} slots={self.slots} coalesced={self.coalesced} lost={self.lost} "
            f"by_instance={dict(sorted(self.by_instance.items()))} "
            f"cpu_starved={self.starved:.2f} allowed={self.allowed:.2f}"
        )


def check_once(
    runs: Sequence[RunRow],
    effects: Sequence[Effect] | None,
    intervals: dict[str, float],
    first_slots: dict[str, datetime],
    *,
    max_coalesced_fraction: float = 0.25,
    starved: float = 0.0,
) -> SlotReport:
    """Assert that no slot ran twice and that the run history and the side effects agree.

    - No two runs (and no two side effects) share ``(job_id, generation, scheduled_for)``.
    - Every side effect belongs to a recorded run; every run with outcome "ok" left its side effect.
    - Every run has an outcome (nothing stuck in flight) and started no earlier than its slot.
    - Consecutive slots of a job are whole intervals apart on its grid; a step of k > 1
      intervals is coalescing, and is accepted only when the run that covered it started
      at least (k - 1) intervals after the first skipped slot was due, i.e. it is explained
      by a late start. Coalesced slots stay under `max_coalesced_fraction` (liveness) of the
      slots, widened by how `starved` of CPU the machine was (`CpuPressure.share()`): where
      runnable tasks were denied a share p of the CPU, up to that share of the slots that the
      bound does not already allow may coalesce too (a scheduler given no core starts late;
      the exact checks above still hold every start to the grid).
    """
    allowed = max_coalesced_fraction + (1 - max_coalesced_fraction) * starved
    report = SlotReport(runs=len(runs), starved=starved, allowed=allowed)
    keys = [(r.job_id, r.generation, r.scheduled_for) for r in runs]
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"slots run twice (run history): {sorted(dupes)}"
    if effects is not None:  # None: check the run history only
        _check_effects(runs, effects, intervals)
    open_runs = [r for r in runs if r.outcome is None]
    assert not open_runs, f"runs left without an outcome: {open_runs[:5]}"
    early = [r for r in runs if r.started_at < r.scheduled_for - EPS]
    assert not early, f"runs started before their slot: {early[:5]}"
    for r in runs:
        report.by_instance[r.instance_id] = report.by_instance.get(r.instance_id, 0) + 1
        report.lost += r.outcome == "lost"
    for job_id, interval in intervals.items():
        mine = sorted((r for r in runs if r.job_id == job_id), key=lambda r: r.scheduled_for)
        if not mine:
            continue
        step = timedelta(seconds=interval)
        previous_slot = first_slots[job_id] - step  # the first run may itself coalesce the first slots
        for r in mine:
            k = round((r.scheduled_for - previous_slot) / step)
            drift = abs((r.scheduled_for - previous_slot) - k * step)
            assert k >= 1, f"{job_id}: slot {r.scheduled_for} not after {previous_slot}"
            assert drift <= timedelta(microseconds=k + 1), (
                f"{job_id}: slot {r.scheduled_for} is not on the grid after {previous_slot} (interval {interval})"
            )
            if k > 1:
                first_skipped = previous_slot + step
                late_by = r.started_at - first_skipped
                assert late_by >= (k - 1) * step - EPS, (
                    f"{job_id}: {k - 1} slots after {previous_slot} coalesced, but the covering run "
                    f"started only {late_by} after the first of them"
                )
                report.coalesced += k - 1
            report.slots += k
            previous_slot = r.scheduled_for
    assert report.slots > 0, "nothing ran: the test proved nothing"
    assert report.coalesced <= allowed * report.slots, f"too many slots coalesced: {report.summary()}"
    return report


def _check_effects(runs: Sequence[RunRow], effects: Sequence[Effect], intervals: dict[str, float]) -> None:
    effect_keys = [(e.job_id, e.generation, e.scheduled_for) for e in effects]
    effect_dupes = sorted({k for k in effect_keys if effect_keys.count(k) > 1})
    assert not effect_dupes, f"slots run twice (side effects): {effect_dupes}"
    run_keys = {(r.job_id, r.generation, r.scheduled_for.isoformat()) for r in runs}
    stray = sorted(set(effect_keys) - run_keys)
    assert not stray, f"side effects without a recorded run: {stray[:10]}"
    seen = set(effect_keys)
    ok_without_effect = sorted(
        (r.job_id, r.scheduled_for.isoformat())
        for r in runs
        if r.outcome == "ok"
        and r.job_id in intervals
        and (r.job_id, r.generation, r.scheduled_for.isoformat()) not in seen
    )
    assert not ok_without_effect, f"runs recorded ok without their side effect: {ok_without_effect[:10]}"


def wait_past(url: str, job_ids: Sequence[str], when: datetime, timeout: float = 3 * TIMEOUT) -> None:
    """Poll the run history until every job in `job_ids` has a finished run of a slot at or after `when`."""
    reader = RunReader(url)
    latest: dict[str, datetime] = {}

    def done() -> bool:
        latest.clear()
        for r in reader.runs():
            if r.outcome is not None:
                latest[r.job_id] = max(latest.get(r.job_id, r.scheduled_for), r.scheduled_for)
        return all(j in latest and latest[j] >= when for j in job_ids)

    try:
        wait_until(throttled(done), timeout=timeout, message=f"runs of {list(job_ids)} for slots at or after {when}")
    except AssertionError as exc:
        behind = {j: latest.get(j) for j in job_ids if j not in latest or latest[j] < when}
        raise AssertionError(f"{exc}; behind (latest finished slot): {behind}") from None
    finally:
        reader.close()


def now_utc() -> datetime:
    """The wall-clock time now, aware."""
    return datetime.fromtimestamp(time.time()).astimezone()


def effects_of(c: Cluster) -> list[Effect]:
    """The side effects recorded so far."""
    return read_effects(c.effects)
