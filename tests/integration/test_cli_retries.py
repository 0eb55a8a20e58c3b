"""Retries as the command line shows them: each run's attempt, the retry policy and a pending attempt.

The history is made by a real scheduler on a `FakeClock` (each advance waited
for with `wait_idle`): "invoices-sync" fails every attempt and gives up after
three, "flaky" failed its first attempt and waits for its second, "report"
has no retries. The CLI then reads the file in a subprocess, in a pipe and in
a real terminal of 80 columns.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final

import pytest

from persched._model.models import JobState
from persched._model.plain_models import PlainJob
from persched.cli.listing import policies
from tests.integration.test_cli_operator import FULL_HEADERS, _run_in_pty
from tests.support import cli_jobs, jobs
from tests.support.cli_run import persched
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from persched import JobScheduler, Run
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.slow

LONG_ERROR: Final = "upstream refused: 503 " * 4
_AT: Final = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)


def _iso(run: Run) -> str:
    return run.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ")


def _runs(sched: JobScheduler, job_id: str) -> list[Run]:
    return sorted(sched.runs(job_id, limit=100), key=lambda run: run.run_id or 0)


@pytest.fixture
def retried(make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str) -> str:
    sched = make_scheduler(start=True)
    sched.schedule(
        "invoices-sync",
        cli_jobs.fail_always,
        3600.0,
        args=(LONG_ERROR,),
        start_in=0,
        retries=2,
        retry_delay_seconds=10,
    )
    sched.schedule(
        "flaky",
        jobs.follow,
        3600.0,
        args=("flaky", ["error", "ok"]),
        start_in=0,
        retries=3,
        retry_delay_seconds=45,
        retry_max_delay_seconds=300,
        retry_lost=True,
    )
    sched.schedule("report", cli_jobs.noop, 300.0, start_in=0)
    assert sched.wait_idle(TIMEOUT)
    for step in (10.0, 20.0):  # invoices-sync's attempts 2 and 3 (10 s, then 20 s after the one before)
        fake_clock.advance(step)
        assert sched.wait_idle(TIMEOUT)
    assert [run.attempt for run in _runs(sched, "invoices-sync")] == [1, 2, 3]
    assert [run.attempt for run in _runs(sched, "flaky")] == [1]  # its attempt 2 is due 45 s after the first
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return sqlite_url


def test_runs_show_each_runs_attempt_in_a_try_column(retried: str) -> None:
    proc = persched("--db", retried, "runs", "invoices-sync", "--wide")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    columns = re.split(r"\s{2,}", header.strip())
    assert "TRY" in columns
    tries = [re.split(r"\s{2,}", row.strip())[columns.index("TRY")] for row in rows]
    assert tries == ["3", "2", "1"]  # newest first
    # A table without a retried run keeps its columns.
    plain = persched("--db", retried, "runs", "report").stdout.splitlines()[0]
    assert "TRY" not in plain.split()


def test_runs_json_carries_each_runs_attempt(retried: str) -> None:
    listed = json.loads(persched("--db", retried, "runs", "--json").stdout)
    attempts = {(run["job_id"], run["attempt"]) for run in listed}
    assert attempts == {("invoices-sync", 1), ("invoices-sync", 2), ("invoices-sync", 3), ("flaky", 1), ("report", 1)}
    slots = {run["scheduled_for"] for run in listed if run["job_id"] == "invoices-sync"}
    assert len(slots) == 1  # the attempts of one slot


def test_show_says_the_retry_policy_in_one_line_and_the_pending_attempt(retried: str) -> None:
    proc = persched("--db", retried, "show", "flaky", "--wide")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("retr")] == [
        "retries     3 (first after 45 s, each delay x2, at most 5 min; lost runs too)"
    ]
    listed = json.loads(persched("--db", retried, "runs", "flaky", "--json").stdout)
    slot = listed[0]["scheduled_for"][:19] + "Z"
    (next_run,) = [line for line in lines if line.startswith("next run")]
    assert next_run.endswith(f", attempt 2 of 4 for the slot {slot}"), next_run
    # A job whose slot ended (gave up) has no pending attempt: its next run is its next slot.
    after = persched("--db", retried, "show", "invoices-sync", "--wide").stdout
    assert "retries     2 (first after 10 s, each delay x2)" in after
    assert "attempt" not in next(line for line in after.splitlines() if line.startswith("next run"))
    # Without retries: no line at all.
    assert "retr" not in persched("--db", retried, "show", "report").stdout


def test_jobs_and_show_json_carry_the_retry_fields(retried: str) -> None:
    listed = {job["job_id"]: job for job in json.loads(persched("--db", retried, "jobs", "--json").stdout)}
    flaky = listed["flaky"]
    fields = ("retries", "retry_delay_seconds", "retry_backoff", "retry_max_delay_seconds", "retry_lost")
    assert tuple(flaky[name] for name in fields) == (3, 45.0, 2.0, 300.0, True)
    assert flaky["pending_attempt"] == 2
    assert flaky["pending_attempt_slot"] is not None
    assert flaky["next_run_at"] > flaky["pending_attempt_slot"]
    assert (listed["report"]["pending_attempt"], listed["report"]["pending_attempt_slot"]) == (None, None)
    assert tuple(listed["report"][name] for name in fields) == (0, 10.0, 2.0, None, False)
    shown = json.loads(persched("--db", retried, "show", "flaky", "--json").stdout)
    assert (shown["pending_attempt"], shown["pending_attempt_slot"]) == (2, flaky["pending_attempt_slot"])
    assert [run["attempt"] for run in shown["runs"]] == [1]


RETRY_TABLES: Final = (["runs"], ["runs", "--all-namespaces"], ["show", "invoices-sync"], ["show", "flaky"])


@pytest.mark.parametrize("argv", RETRY_TABLES, ids=" ".join)
def test_tables_with_retries_fit_80_columns_at_a_terminal_and_in_a_pipe(retried: str, argv: list[str]) -> None:
    full = persched("--db", retried, *argv)
    assert max(map(len, full.stdout.splitlines())) > 80  # the long errors: there is something to fit
    piped = persched("--db", retried, *argv, env={"COLUMNS": "80"})
    assert piped.returncode == 0, piped.stderr
    for out in (piped.stdout, _run_in_pty(["--db", retried, *argv], 80)):
        assert max(map(len, out.splitlines())) <= 80, out
        header = next(line for line in out.splitlines() if re.match(r"(NAMESPACE +)?RUN ", line))
        words = re.split(r"\s{2,}", header.strip())
        assert all(word in FULL_HEADERS | {"TRY", "NAMESPACE"} for word in words), header
        # Never left out where a run is a retry: two runs of one slot read as one without it.
        assert ("TRY" in words) == (argv != ["show", "flaky"]), out  # flaky's one run is its first attempt


def _policy(**changes: object) -> list[str]:
    """The retry line of `show` for a job with `changes`."""
    base = PlainJob(
        job_id="j",
        target="m:f",
        args=(),
        kwargs={},
        interval_seconds=60.0,
        next_run_at=_AT,
        generation=1,
        state=JobState.SCHEDULED,
        created_at=_AT,
        updated_at=_AT,
    )
    return [f"{name}: {words}" for name, words in policies(replace(base, **changes)) if name == "retries"]  # type: ignore[arg-type]  # the fields under test


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        ({"retries": 1, "retry_delay_seconds": 90.0}, "retries: 1 (after 90 s)"),
        ({"retries": 4, "retry_backoff": 1.0}, "retries: 4 (each after 10 s)"),
        ({"retries": 2, "retry_backoff": 1.5}, "retries: 2 (first after 10 s, each delay x1.5)"),
        ({"retries": 3, "retry_max_delay_seconds": 5.0}, "retries: 3 (each after 5 s)"),  # the cap is every delay
        ({"retries": 3, "retry_delay_seconds": 60.0, "retry_max_delay_seconds": 3600.0},
         "retries: 3 (first after 1 min, each delay x2, at most 1 h)"),
        ({"retries": 1, "retry_lost": True}, "retries: 1 (after 10 s; lost runs too)"),
    ],
)  # fmt: skip
def test_the_retry_line_says_what_the_options_do(changes: dict[str, object], line: str) -> None:
    assert _policy(**changes) == [line]


def test_retry_options_without_retries_show_nothing() -> None:
    # They change nothing: a slot is tried once.
    assert _policy(retries=0, retry_delay_seconds=60.0, retry_lost=True) == []
