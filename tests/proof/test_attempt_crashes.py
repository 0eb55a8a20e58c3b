"""Crashes and attempts: SIGKILL a scheduler in the middle of a retried slot, then restart
(docs/reference/behaviour.md, "Retries" and "Restart and crashes"), on every engine.

A child process (`tests/support/retry_child.py`: real clock, lease 1 s) runs job
"x" whose attempt 1 fails and which has 2 retries; each callable start goes to a
file. Schedulers started here on the same database (other instance ids, lease
0.5 s) then take over.

- Killed inside attempt 2 (between its claim and its completion): once its lease
  ran out the run is recorded "lost"; with ``retry_lost=True`` attempt 3 of the
  same slot then runs (here), once; without it the slot is lost: no attempt is
  pending and the job waits for its next slot.
- Killed with attempt 2 pending (attempt 1's completion committed, attempt 2
  not yet due): two schedulers restarted at once run attempt 2 exactly once.

Afterwards the history checker (frame-free rules: two processes) finds every
attempt of the slot once, each after the one before ended in failure, and no
run left open. Waits are for the database's rows and the child's marker, never
for an interleaving.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from tests.support.helpers import TIMEOUT, db_sql, wait_until
from tests.support.history import assert_consistent, runs_from_url
from tests.support.proof_jobs import read_file_starts
from tests.support.retry_child import JOB

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.support.history import RunRow

pytestmark = [
    pytest.mark.slow,
    pytest.mark.every_engine,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"),
]

REPO: Final = Path(__file__).resolve().parents[2]
READY_TIMEOUT: Final = 30.0  # real seconds for the child to reach its point (imports, start-up)
SETTLE_TIMEOUT: Final = 30.0  # real seconds for the restart to recover the lost run and go on


@dataclass
class Child:
    """The killed child's files."""

    url: str
    starts: Path
    marker: Path


def _sql(url: str, statement: str, **params: object) -> list[tuple[object, ...]]:
    return db_sql(url, statement, **params)


def _start_child(url: str, tmp_path: Path, *, block: int, retry_lost: bool, delay: float) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "tests.support.retry_child", url, str(tmp_path / "starts.log")]
    argv += [str(tmp_path / "marker"), str(block), "1" if retry_lost else "0", str(delay)]
    out = (tmp_path / "child.out").open("wb")
    try:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


def _kill_when(child: subprocess.Popen[bytes], tmp_path: Path, ready: Callable[[], bool], message: str) -> None:
    try:
        wait_until(lambda: ready() or child.poll() is not None, timeout=READY_TIMEOUT, message=message)
        assert child.poll() is None, f"child exited {child.returncode}:\n{(tmp_path / 'child.out').read_text()}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)


@pytest.fixture
def schedulers() -> Iterator[list[JobScheduler]]:
    made: list[JobScheduler] = []
    yield made
    for sched in made:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def _restart(url: str, made: list[JobScheduler], name: str) -> JobScheduler:
    sched = JobScheduler(url, workers=2, instance_id=name, lease_seconds=0.5, heartbeat_seconds=0.1, pickup_seconds=0.2)
    made.append(sched)
    sched.start()
    return sched


def _runs(url: str) -> list[RunRow]:
    return [r for r in runs_from_url(url) if r.job_id == JOB]


def _verify_history(url: str, starts: Path) -> None:
    runs = _runs(url)
    assert_consistent([], runs, read_file_starts(str(starts)), timed=False)


@pytest.mark.parametrize("retry_lost", [True, False], ids=["retry-lost", "no-retry-lost"])
def test_an_attempt_killed_in_flight_is_lost_and_retried_only_with_retry_lost(
    db_url: str, tmp_path: Path, schedulers: list[JobScheduler], retry_lost: bool
) -> None:
    marker = tmp_path / "marker"
    child = _start_child(db_url, tmp_path, block=2, retry_lost=retry_lost, delay=0.2)
    _kill_when(child, tmp_path, marker.exists, "attempt 2 is in flight in the child")
    run_id, attempt = (int(v) for v in marker.read_text().split())
    assert attempt == 2
    [first, second] = _runs(db_url)
    assert (first.attempt, first.outcome, second.run_id, second.attempt, second.outcome) == (
        1,
        "error",
        run_id,
        2,
        None,
    )
    slot = first.scheduled_for

    _restart(db_url, schedulers, "restart")

    def settled() -> bool:
        runs = _runs(db_url)
        lost = any(r.run_id == run_id and r.outcome == "lost" for r in runs)
        return lost and (not retry_lost or any(r.attempt == 3 and r.outcome == "ok" for r in runs))

    wait_until(settled, timeout=SETTLE_TIMEOUT, message="attempt 2 recorded lost (and attempt 3 ran, with retry_lost)")
    [(pending, next_run_at)] = _sql(db_url, "SELECT retry_attempt, next_run_at FROM persched_jobs WHERE job_id = 'x'")
    assert pending is None  # nothing left to try: attempt 3 succeeded, or the slot was given up
    runs = _runs(db_url)
    expected = [(1, "error"), (2, "lost"), (3, "ok")] if retry_lost else [(1, "error"), (2, "lost")]
    assert [(r.attempt, r.outcome) for r in runs] == expected
    assert {r.scheduled_for for r in runs} == {slot}
    assert [r.instance_id for r in runs] == ["child", "child", "restart"][: len(expected)]
    assert next_run_at is not None
    for sched in schedulers:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    assert [(r.attempt, r.outcome) for r in _runs(db_url)] == expected  # and nothing more ran
    _verify_history(db_url, tmp_path / "starts.log")


def test_an_attempt_pending_at_the_kill_runs_once_after_a_restart_of_two_instances(
    db_url: str, tmp_path: Path, schedulers: list[JobScheduler]
) -> None:
    delay = 2.0  # real seconds: attempt 2 is due after the kill and both restarts are up

    def pending() -> bool:
        rows = _sql(db_url, "SELECT retry_attempt FROM persched_jobs WHERE job_id = 'x'")
        return bool(rows) and rows[0][0] == 2

    child = _start_child(db_url, tmp_path, block=0, retry_lost=False, delay=delay)
    _kill_when(child, tmp_path, pending, "attempt 1 failed and attempt 2 is pending")
    killed_at = time.monotonic()
    assert [(r.attempt, r.outcome) for r in _runs(db_url)] == [(1, "error")], "attempt 2 ran before the kill"

    for name in ("restart-a", "restart-b"):
        _restart(db_url, schedulers, name)
    wait_until(
        lambda: any(r.attempt == 2 and r.outcome == "ok" for r in _runs(db_url)),
        timeout=SETTLE_TIMEOUT,
        message="attempt 2 ran after the restart",
    )
    assert time.monotonic() - killed_at < delay + SETTLE_TIMEOUT
    for sched in schedulers:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    runs = _runs(db_url)
    assert [(r.attempt, r.outcome) for r in runs] == [(1, "error"), (2, "ok")]
    assert runs[1].instance_id in ("restart-a", "restart-b")
    assert runs[1].scheduled_for == runs[0].scheduled_for
    assert [s.attempt for s in read_file_starts(str(tmp_path / "starts.log"))] == [1, 2]
    _verify_history(db_url, tmp_path / "starts.log")
