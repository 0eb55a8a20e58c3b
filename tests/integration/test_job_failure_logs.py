"""What a failing job prints in a process that never configured logging, and in one that did (real children).

Without a handler, each failure is one line on stderr (through
`logging.lastResort`): the job, the exception, and where its traceback is.
With logging configured, the ERROR record carries the traceback, the job's
own frames first.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Final

import pytest

from tests.support.cli_run import REPO, RUN_TIMEOUT, cli_env

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

CHILD: Final = """\
import logging
import sys

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support import failing_jobs

if sys.argv[2] == "configured":
    logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
clock = FakeClock(1_700_000_000.25)
with JobScheduler(sys.argv[1], clock=clock) as sched:
    sched.schedule("plain", failing_jobs.fail_sync, 60.0, args=("missing",), start_in=0)
    sched.schedule("coroutine", failing_jobs.fail_async, 60.0, args=("missing",), start_in=0)
    assert sched.wait_idle(30)  # the first run of each, due at once
    clock.advance(60)
    assert sched.wait_idle(30)  # the second
"""
LINE: Final = (
    "job {job} generation 1 raised tests.support.failing_jobs.LookupFailed: no setting 'missing'"
    " (the traceback is in the run's error; configure logging to see it here)"
)


def run_child(tmp_path: Path, logging_setup: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "jobs.db"), logging_setup],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_without_logging_configured_each_failure_is_one_line(tmp_path: Path) -> None:
    proc = run_child(tmp_path, "none")
    assert "Traceback" not in proc.stderr
    assert sorted(proc.stderr.splitlines()) == sorted([LINE.format(job="plain"), LINE.format(job="coroutine")] * 2)


def test_with_logging_configured_the_error_has_the_traceback(tmp_path: Path) -> None:
    proc = run_child(tmp_path, "configured")
    assert proc.stderr.count("Traceback (most recent call last):") == 2 * 2 * 2  # 2 jobs, 2 runs, a chain of 2
    assert proc.stderr.count("ERROR persched._engine.workers job plain generation 1 raised\nTraceback") == 2
    assert proc.stderr.count("ERROR persched._engine.workers job coroutine generation 1 raised\nTraceback") == 2
    assert "_engine/workers.py" not in proc.stderr  # the job's frames only
