"""Forks with real ``os.fork()``: a scheduler belongs to the process that made it.

docs/reference/behaviour.md, "Forks", is the rule tested here.

Each scenario runs in a `tests.support.fork_child` process (forking pytest
itself would fork its reporting too). The child script waits for its forked
children with a bound and kills one that did not end, so an old-code failure
shows up as ``"hung"`` rather than as an orphan left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Final

import pytest

from tests.multi._cluster import REPO, child_env
from tests.support.fork_child import BUSY_FORKS, FORKED_CODE, WAIT

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

SCRIPT_TIMEOUT: Final = 6 * WAIT  # the whole child script, forked children's bounded waits included


def _run(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    return _run_with_stderr(tmp_path, *args)[0]


def _run_with_stderr(tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.fork_child", *args, "--out", str(out)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"fork_child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return [json.loads(line) for line in out.read_text().splitlines()], proc.stderr


@pytest.mark.parametrize(("how", "code"), [("exit", FORKED_CODE), ("return", 0), ("raise", 1)])
def test_forked_child_of_a_job_ends(db_url: str, tmp_path: Path, how: str, code: int) -> None:
    """A job forks; its child raises SystemExit / returns / raises: the child ends, the parent runs on."""
    lines, stderr = _run_with_stderr(tmp_path, "job", "--url", db_url, "--how", how)
    assert "was forked from process" not in stderr  # a job's own fork is no surprise
    children = [line for line in lines if "child" in line]
    summary = lines[-1]
    assert len(children) >= 2, lines  # the parent's scheduler ran the job again after a child ended
    assert {c["status"] for c in children} == {f"exit {code}"}, children
    # The runs are the parent's, recorded once each; the children recorded nothing.
    assert summary["outcomes"], summary
    assert set(summary["outcomes"]) <= {"ok", None}, summary


def test_every_method_refuses_in_a_forked_child(db_url: str, tmp_path: Path) -> None:
    """In a forked child every public method raises SchedulerStateError saying why and what to do."""
    lines, stderr = _run_with_stderr(tmp_path, "methods", "--url", db_url)
    # Not silent: the child is told at the fork that the scheduler is not its own.
    warnings = [line for line in stderr.splitlines() if "was forked from process" in line]
    assert len(warnings) == 1, stderr[-4000:]
    assert "post_fork" in warnings[0], warnings
    results = next(line["child_results"] for line in lines if "child_results" in line)
    for name, result in results.items():
        assert result.startswith("SchedulerStateError: "), (name, result)
        assert "forked child" in result, (name, result)
        assert "post_fork" in result, (name, result)
        assert "--preload" in result, (name, result)
    final = lines[-1]
    # The child's atexit hook left the parent's scheduler alone: it ended at once,
    # and neither used nor closed a pooled connection.
    assert final == {"child_status": "exit 0", "parent_carried_on": True}, lines
    pool_events = [line for line in lines if "child_pool_event" in line]
    assert not pool_events, pool_events


def test_a_child_forked_while_sqlite_is_busy_opens_it(tmp_path: Path) -> None:
    """A fork while the scheduler's threads are inside SQLite: each child opens the database of its own."""
    # Without the fork gate (persched._store.fork_gate) about four children in ten hung in sqlite3.connect().
    (line,) = _run(tmp_path, "busy", "--url", f"sqlite:///{tmp_path / 'busy.db'}")
    assert line == {"busy_children": ["exit 0"] * BUSY_FORKS}, line


def test_a_fork_never_waits_for_a_jobs_own_code(tmp_path: Path) -> None:
    """The fork gate covers persched's own SQLite transactions, not a job's code: a job that holds a
    SQLite database of its own open does not delay a fork (docs/reference/behaviour.md#forks)."""
    lines, stderr = _run_with_stderr(tmp_path, "own-sqlite", "--url", f"sqlite:///{tmp_path / 'jobs.db'}")
    assert lines == [{"own_sqlite_child": "exit 0", "fork_waited_for_the_job": False}], lines
    assert "went ahead while" not in stderr  # the gate's warning after FORK_WAIT
