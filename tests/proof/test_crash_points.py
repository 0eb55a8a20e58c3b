"""Crash points: SIGKILL at named points of a claim, a run,
a completion, schedule(), deschedule() and a recovery; then restart on the same file and check the history
(docs/reference/behaviour.md, "Restart and crashes"; docs/multi.md, "When an instance dies").

A child (`tests/support/crash_child.py`, real clock, lease 1 s, heartbeat and
pick-up 0.2 s) runs jobs at 0.05-0.2 s intervals whose callable records every
start to a file. It stops at a named point (its methods wrapped and engine
events, in the child only) and writes a marker; the test SIGKILLs it. A
scheduler restarted here on the same file (lease 0.5 s) must, within a bounded
wait, record every run left open as "lost" (after one lease of observation)
and run every job that is still scheduled again. After its clean shutdown:

- the history checker (`check(..., timed=False)`: two processes, so only the
  frame-free rules) finds no slot claimed twice (R3), no overlap (R2), no start
  of a generation after the call that killed it returned, beyond the one raced
  claim (R1), every start matching a stored claim and no run left open (R5);
- ``PRAGMA integrity_check`` is ok, no job row is 'running';
- every run open at the kill is "lost", no run of the restart is;
- every job still scheduled ran again in the restart, and only its current
  generation did (a killed generation never runs in the restart);
- and what each point decides (`EXPECT`):

=========================  =================================================================
point                      what must hold after the restart
=========================  =================================================================
claim-before-tx            nothing claimed: the jobs run on; generic checks only
claim-after-update         the claim rolled back (no run row); generic checks
claim-before-commit        the claim and its run rows rolled back; generic checks
claim-after-commit         the won runs are "lost", their callables never started
in-callable                the run is "lost"; its callable started once, never again
callable-returned          the run is "lost" (its outcome was never written), started once
completion-before-write    the completed runs are "lost": an outcome not committed is lost
completion-after-update    same: the UPDATEs rolled back
completion-before-commit   same
completion-after-commit    the completed runs keep outcome "ok"
upsert-before-commit       schedule() never returned and rolled back: "a" keeps generation 1
                           and goes on (no R1 claim: the call did not return)
upsert-after-commit        committed: "a" is generation 2; generation 1 never starts after
                           the commit (R1, with the marker's time as the return) and never in
                           the restart; generation 2 runs
deschedule-before-commit   deschedule() never returned: "b" stays scheduled and keeps running
                           (its old generation may continue: nothing killed it)
deschedule-after-commit    "b" is descheduled and never runs again after the commit (R1) nor
                           in the restart
recover-after-update       recovery rolled back: the dead instance's run is still open and the
recover-before-commit      restart records it "lost" itself; "r" runs again
recover-after-commit       the run is "lost" (by the child); "r" runs again
=========================  =================================================================

Seeded random kill points: the child replaces, deschedules and re-schedules jobs
at a random pace and is killed after a random real delay (the seed is
named in a failure, replay with ``PERSCHED_SEED``). ``PERSCHED_SOAK=1`` runs more of them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import JobScheduler
from tests.proof._settings import scale
from tests.support.crash_child import JOBS, POINTS, RECOVER_JOB, REPLACED_INTERVAL
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.history import Op, OpLog, assert_consistent, runs_from_db
from tests.support.proof_jobs import read_file_starts

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
]

REPO: Final = Path(__file__).resolve().parents[2]
CHILD: Final = REPO / "tests" / "support" / "crash_child.py"
RESTART_ID: Final = "restart"
RESTART_LEASE: Final = 0.5
READY_TIMEOUT: Final = 30.0  # real seconds for the child to reach its point (imports, a 1 s lease)
SETTLE_TIMEOUT: Final = 30.0  # real seconds for the restart to resolve the open runs and run every job
RUNS_AGAIN: Final = 2  # ok runs of each live job the restart must show
MAX_KILL_DELAY: Final = 1.5  # real seconds after "ready" for the random kills
EXERCISED: list[str] = []  # every crash point killed at, for the report


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    named = sorted({p for p in EXERCISED if p in POINTS})
    line = (
        f"crash points exercised: {len(named)} named ({', '.join(named)}), {len(EXERCISED) - len(named)} random kills"
    )
    if reporter is not None:
        reporter.write_line(line)
    print(line)  # noqa: T201 - the report's count


@dataclass
class Crash:
    """A killed child: its files, its marker and what the database held right after the kill."""

    db: Path
    starts: Path
    ops: list[Op]
    marker: dict[str, Any]
    child_id: str
    killed_at: float
    open_at_kill: set[int]

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db}"


def _sql(db: Path, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db, timeout=TIMEOUT)) as conn:
        return conn.execute(statement, params).fetchall()


def _kill_child(tmp_path: Path, point: str, *, seed: int = 0, delay: float = 0.0) -> Crash:
    db, starts, ops, marker = (tmp_path / n for n in ("jobs.db", "starts.log", "ops.jsonl", "marker.json"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, str(CHILD), "--db", str(db), "--starts", str(starts), "--ops", str(ops)]
    argv += ["--marker", str(marker), "--point", point, "--seed", str(seed)]
    out_path = tmp_path / "child.out"
    with out_path.open("wb") as out:
        child = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(
                lambda: marker.exists() or child.poll() is not None,
                timeout=READY_TIMEOUT,
                message=f"the child reached {point}",
            )
            assert child.poll() is None, f"child exited {child.returncode}:\n{out_path.read_text()}"
            if delay:
                time.sleep(delay)  # the random kill point itself, not synchronisation
            assert child.poll() is None, f"child exited {child.returncode}:\n{out_path.read_text()}"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(TIMEOUT)
    killed_at = time.monotonic()
    info: dict[str, Any] = json.loads(marker.read_text())
    open_runs = {int(r[0]) for r in _sql(db, "SELECT run_id FROM persched_runs WHERE outcome IS NULL")}
    return Crash(db, starts, OpLog(ops).read(cut_at=killed_at), info, f"child-{child.pid}", killed_at, open_runs)


def _restart(crash: Crash) -> None:
    """Start a scheduler on the crashed file; wait until the open runs are lost and every job ran again."""
    sched = JobScheduler(
        crash.url,
        workers=4,
        instance_id=RESTART_ID,
        lease_seconds=RESTART_LEASE,
        heartbeat_seconds=0.1,
        pickup_seconds=0.2,
        keep_runs=None,
    )

    def settled() -> bool:
        foreign_open = _sql(
            crash.db, "SELECT count(*) FROM persched_runs WHERE outcome IS NULL AND instance_id != ?", (RESTART_ID,)
        )[0][0]
        lagging = _sql(
            crash.db,
            "SELECT j.job_id FROM persched_jobs j WHERE j.state != 'descheduled' AND (SELECT count(*) "
            "FROM persched_runs r WHERE r.job_id = j.job_id AND r.instance_id = ? AND r.outcome = 'ok') < ?",
            (RESTART_ID, RUNS_AGAIN),
        )
        return foreign_open == 0 and not lagging

    sched.start()
    try:
        wait_until(settled, timeout=SETTLE_TIMEOUT, message="open runs lost and every scheduled job ran again")
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def _pending_op(crash: Crash) -> list[Op]:
    """The public call the child was in when killed: returned (after commit) or not (before commit)."""
    pending = crash.marker.get("pending")
    if not pending:
        return []
    point = crash.marker["point"]
    if point.endswith("before-commit"):
        return [Op(pending["kind"], pending["job_id"], pending["invoked"], crash.killed_at, None)]
    # Committed: it linearized before the marker was written, so that is a (late) return.
    generation = crash.marker["generation"]
    result: int | bool = generation if pending["kind"] == "schedule" else generation is not None
    return [Op(pending["kind"], pending["job_id"], pending["invoked"], crash.marker["mono"], result)]


def _verify(crash: Crash) -> None:
    """The checks every crash point must pass (module docstring), then the point's own."""
    with closing(sqlite3.connect(crash.db, timeout=TIMEOUT)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        jobs = {j: (s, g) for j, s, g in conn.execute("SELECT job_id, state, generation FROM persched_jobs")}
    assert all(s != "running" for s, _ in jobs.values()), f"a row stuck in 'running' after a clean shutdown: {jobs}"
    runs = runs_from_db(str(crash.db))
    by_id = {r.run_id: r for r in runs}
    starts = read_file_starts(str(crash.starts))
    ops = crash.ops + _pending_op(crash)
    assert_consistent(ops, runs, starts, end=time.monotonic(), live_after=0.0, timed=False)

    assert all(by_id[i].outcome == "lost" for i in crash.open_at_kill), [by_id[i] for i in crash.open_at_kill]
    restart_runs = [r for r in runs if r.instance_id == RESTART_ID]
    assert not [r for r in restart_runs if r.outcome == "lost"], "a run of the live restart was recorded lost"
    for job_id, (state, generation) in jobs.items():
        mine = [r for r in restart_runs if r.job_id == job_id]
        if state == "descheduled":
            assert not mine, f"descheduled {job_id} ran in the restart: {mine}"
        else:
            assert [r for r in mine if r.outcome == "ok"], f"{job_id} never ran again after the restart"
            assert {r.generation for r in mine} == {generation}, f"a stale generation of {job_id} ran: {mine}"
    EXPECT.get(crash.marker["point"], _nothing_more)(crash)


# --- what each point decides ---------------------------------------------------------------------


def _nothing_more(crash: Crash) -> None:
    pass


def _outcomes(crash: Crash, run_ids: list[int]) -> dict[int, str | None]:
    by_id = {r.run_id: r.outcome for r in runs_from_db(str(crash.db))}
    return {i: by_id.get(i) for i in run_ids}


def _started(crash: Crash, run_id: int) -> int:
    return sum(1 for s in read_file_starts(str(crash.starts)) if s.run_id == run_id)


def _claimed_never_started(crash: Crash) -> None:
    ids: list[int] = crash.marker["run_ids"]
    assert ids
    assert set(_outcomes(crash, ids).values()) == {"lost"}, _outcomes(crash, ids)
    assert all(_started(crash, i) == 0 for i in ids), "a claimed run's callable started after the kill"


def _one_run_lost(crash: Crash) -> None:
    run_id: int = crash.marker["run_id"]
    assert _outcomes(crash, [run_id]) == {run_id: "lost"}
    assert _started(crash, run_id) == 1


def _completions(outcome: str) -> Any:  # noqa: ANN401 - a check
    def verify(crash: Crash) -> None:
        ids: list[int] = crash.marker["run_ids"]
        assert ids
        assert set(_outcomes(crash, ids).values()) == {outcome}, _outcomes(crash, ids)
        assert all(_started(crash, i) == 1 for i in ids)

    return verify


def _generation_of(crash: Crash, job_id: str) -> tuple[str, int]:
    state, generation = _sql(crash.db, "SELECT state, generation FROM persched_jobs WHERE job_id = ?", (job_id,))[0]
    return str(state), int(generation)


def _upsert_rolled_back(crash: Crash) -> None:
    assert _generation_of(crash, "a") == ("scheduled", 1)
    interval = _sql(crash.db, "SELECT interval_seconds FROM persched_jobs WHERE job_id = 'a'")[0][0]
    assert interval == JOBS["a"]


def _upsert_committed(crash: Crash) -> None:
    assert crash.marker["generation"] == 2
    assert _generation_of(crash, "a") == ("scheduled", 2)
    interval = _sql(crash.db, "SELECT interval_seconds FROM persched_jobs WHERE job_id = 'a'")[0][0]
    assert interval == REPLACED_INTERVAL


def _deschedule_rolled_back(crash: Crash) -> None:
    assert _generation_of(crash, "b") == ("scheduled", 1)


def _deschedule_committed(crash: Crash) -> None:
    assert _generation_of(crash, "b") == ("descheduled", 1)
    late = [s for s in read_file_starts(str(crash.starts)) if s.job_id == "b" and s.start > crash.marker["mono"]]
    assert len(late) <= 1, f"b started {len(late)} times after its deschedule committed"


def _dead_run_lost(by_restart: bool) -> Any:  # noqa: ANN401 - a check
    def verify(crash: Crash) -> None:
        run_id: int = crash.marker["run_id"]
        (instance, outcome) = _sql(
            crash.db, "SELECT instance_id, outcome FROM persched_runs WHERE run_id = ?", (run_id,)
        )[0]
        assert (instance, outcome) == ("dead", "lost")
        assert (run_id in crash.open_at_kill) == by_restart
        assert _generation_of(crash, RECOVER_JOB) == ("scheduled", 1)

    return verify


EXPECT: Final = {
    "claim-after-commit": _claimed_never_started,
    "in-callable": _one_run_lost,
    "callable-returned": _one_run_lost,
    "completion-before-write": _completions("lost"),
    "completion-after-update": _completions("lost"),
    "completion-before-commit": _completions("lost"),
    "completion-after-commit": _completions("ok"),
    "upsert-before-commit": _upsert_rolled_back,
    "upsert-after-commit": _upsert_committed,
    "deschedule-before-commit": _deschedule_rolled_back,
    "deschedule-after-commit": _deschedule_committed,
    "recover-after-update": _dead_run_lost(by_restart=True),
    "recover-before-commit": _dead_run_lost(by_restart=True),
    "recover-after-commit": _dead_run_lost(by_restart=False),
}


# --- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("point", list(POINTS))
def test_sigkill_at_a_named_point_then_restart(tmp_path: Path, point: str) -> None:
    crash = _kill_child(tmp_path, point)
    assert crash.marker["point"] == point
    EXERCISED.append(point)
    _restart(crash)
    _verify(crash)


@pytest.mark.parametrize("round_", range(scale(3, 30)))
def test_sigkill_at_a_random_moment_then_restart(tmp_path: Path, round_: int, seed: int) -> None:
    rng = random.Random(seed)
    delay = rng.uniform(0.0, MAX_KILL_DELAY)
    crash = _kill_child(tmp_path, "random", seed=rng.randrange(2**31), delay=delay)
    EXERCISED.append(f"random+{delay:.3f}s")
    _restart(crash)
    _verify(crash)
