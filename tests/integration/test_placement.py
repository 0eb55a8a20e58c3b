"""Where a framework integration's jobs run (persched.integrations._process), with real forks in a child process.

A process that forks its servers (gunicorn's master under ``--preload``)
runs no scheduler; each child it forks starts its own as it begins; a child
forked by that worker in turn (a request's ``multiprocessing``) starts
none. The framework tests show the same under gunicorn itself
(tests/integration/test_gunicorn.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.multi._cluster import REPO, child_env
from tests.support.helpers import TIMEOUT, sql

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.slow
def test_only_a_worker_forked_from_the_waiting_process_starts_a_scheduler(tmp_path: Path) -> None:
    db, out = f"sqlite:///{tmp_path / 'placed.db'}", tmp_path / "placed.jsonl"
    command = [sys.executable, "-m", "tests.support.fork_placement", db, str(out)]
    done = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=3 * TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line["role"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert lines["master"]["scheduler_of"] is None  # it waits for its workers
    assert lines["worker"]["scheduler_of"] == lines["worker"]["pid"]  # started in the fork hook
    assert lines["worker's child"]["scheduler_of"] is None  # the worker's own forks start nothing
    assert sql(db, "SELECT job_id FROM persched_jobs") == [("placed.tick",)]  # the worker declared the jobs
