"""Async jobs cannot take the application down, nor starve the sync jobs (a child process each).

Each test runs tests/support/async_child.py: an application whose main is
``asyncio.run(main())``, as under uvicorn, so a job that ends the
application's loop shows as the child's exit code. The child writes what it
saw as JSON and exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support.async_child import BLOCK_MAX, INTERVAL, SYNC_RUNS
from tests.support.pressure import CpuPressure, slower_by

REPO: Final = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT: Final = 60.0  # real seconds a child takes at most
SLACK: Final = 0.05  # seconds between the child's time.time() and the scheduler's frame (read at start)

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


def run_child(scenario: str, url: str, tmp_path: Path) -> dict[str, Any]:
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.async_child", scenario, url, str(result)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"the application ended with {proc.returncode}:\n{proc.stderr}"
    seen: dict[str, Any] = json.loads(result.read_text())
    return seen


@pytest.mark.parametrize("scenario", ["escape-on-loop", "escape-own-loops", "escape-threaded"])
def test_a_job_raising_system_exit_or_keyboard_interrupt_is_an_error_and_the_loop_goes_on(
    db_url: str, tmp_path: Path, scenario: str
) -> None:
    seen = run_child(scenario, db_url, tmp_path)
    for job, raised in (("exit", "SystemExit: 3"), ("interrupt", "KeyboardInterrupt")):
        runs = seen[job]
        assert [r["outcome"] for r in runs] == ["error"] * 3, job  # and it kept its schedule
        for r in runs:
            assert r["error"].rstrip().endswith(raised), r["error"]
            assert "EscapedError" not in r["error"]  # what the job raised, not how it was carried
    assert [r["outcome"] for r in seen["after"]] == ["ok"]  # the same loop (one worker's, or the app's) runs on


@pytest.mark.slow
def test_a_blocked_application_loop_stalls_the_async_jobs_not_the_workers(db_url: str, tmp_path: Path) -> None:
    pressure = CpuPressure()
    try:
        seen = run_child("blocked-loop", db_url, tmp_path)
    finally:
        pressure.stop()
    block = seen["block"]
    # The loop was blocked until the sync job had run SYNC_RUNS times: the workers stayed free for it.
    assert block["reached"], f"the sync job ran {block['sync_runs']} times in {BLOCK_MAX} s while the loop was blocked"
    blocked = block["end"] - block["start"]
    # Near its rate: SYNC_RUNS runs at INTERVAL take SYNC_RUNS * INTERVAL, slower by the share of the
    # CPU that other work denied; a starved job takes BLOCK_MAX (the bound stays below it).
    near_its_rate = slower_by(2 * SYNC_RUNS * INTERVAL, pressure, at_most=BLOCK_MAX - 0.5)
    assert blocked < near_its_rate, f"{blocked:.2f} s (CPU denied: {pressure.share():.0%})"
    # No coroutine started while the loop was blocked, and the runs that waited for it (claimed
    # before or during the block: which ones depends on how busy the machine is) say they started late.
    waited = []
    for job, runs in seen["runs"].items():
        for r in runs:
            if r["outcome"] is None:
                continue  # in flight as the child looked (after the block): its start is written with its outcome
            assert r["outcome"] == "ok", (job, r)
            started = r["started_at"]
            assert not block["start"] + SLACK < started < block["end"] - SLACK, (job, r, block)
            if r["scheduled_for"] < block["end"] - SLACK and started > block["start"] + SLACK:
                waited.append(r)
                assert started >= block["end"] - SLACK, (job, r, block)
    assert waited, "no async run waited for the blocked loop"
    assert min(r["started_at"] - r["scheduled_for"] for r in waited) > 0
