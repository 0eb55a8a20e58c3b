"""A process SIGKILLed mid-run leaves a run that a restarted scheduler records
as "lost" once its lease expired; the job goes on and that slot is not run
again (docs/reference/behaviour.md, "Restart and crashes")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from tests.conftest import SchedulerFactory

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_run_is_lost_then_job_goes_on(tmp_path: Path, make_scheduler: SchedulerFactory) -> None:
    db = tmp_path / "jobs.db"
    marker = tmp_path / "started"
    log = tmp_path / "later-runs.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    with (tmp_path / "child.out").open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.support.sigkill_child", str(db), str(marker), str(log)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: marker.exists() or child.poll() is not None,
                timeout=3 * TIMEOUT,
                message="the child's first run started",
            )
            assert child.poll() is None, (tmp_path / "child.out").read_text()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(TIMEOUT)
    lost_slot = marker.read_text()
    assert lost_slot

    sched = make_scheduler(f"sqlite:///{db}", real_clock=True, lease_seconds=1.0, heartbeat_seconds=0.1)
    sched.start()

    def settled() -> bool:
        runs = sched.runs("victim", limit=1000)
        return any(r.outcome == "lost" for r in runs) and any(r.outcome == "ok" for r in runs)

    wait_until(settled, timeout=3 * TIMEOUT, message="a lost run and a later ok run")
    runs = sched.runs("victim", limit=1000)
    (lost,) = [r for r in runs if r.outcome == "lost"]
    assert lost.scheduled_for.isoformat() == lost_slot
    assert lost.finished_at is not None
    oks = [r for r in runs if r.outcome == "ok"]
    assert all(r.scheduled_for > lost.scheduled_for for r in oks)
    keys = [(r.job_id, r.generation, r.scheduled_for) for r in runs]
    assert len(keys) == len(set(keys))
    # The lost slot was not re-run by the restarted process.
    later = log.read_text().split()
    assert lost_slot not in later
    job = sched.get_job("victim")
    assert job is not None
    assert job.generation == lost.generation
