"""The ``persched`` command line, through real subprocesses (``python -m persched``).

Each test runs the CLI as a user would and checks its output, the parsed
``--json``, the exit code, and that every error is one line on stderr with no
traceback. Databases are seeded in-process with a FakeClock-driven scheduler.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from persched import Job, Run
from tests.support import cli_jobs
from tests.support.cli_run import REPO, RUN_TIMEOUT, cli_env, persched
from tests.support.helpers import TIMEOUT, finished_runs, sql, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.slow


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The process failed with `code`, printing exactly one line (no traceback) on stderr."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def seeded(make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str) -> str:
    """A database with three jobs that ran a few times (one of them failing)."""
    sched = make_scheduler(start=True, workers=2)
    sched.schedule("fast", cli_jobs.noop, 0.25, start_in=0)
    sched.schedule("report", cli_jobs.noop, 300.0)
    sched.schedule("flaky", cli_jobs.fail_always, 60.0, args=("flaky says no",), start_in=0)
    for step in range(1, 4):
        fake_clock.advance(0.25)
        wait_until(lambda step=step: len(finished_runs(sched, "fast")) >= step, message="fast runs")  # type: ignore[misc]  # default-bound loop var
    wait_until(lambda: len(finished_runs(sched, "flaky")) == 1, message="flaky run")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return sqlite_url


# -- help and usage ---------------------------------------------------------------


COMMANDS = ["demo", "migrate", "jobs", "show", "runs", "pause", "resume", "run-now", "deschedule", "run"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command: str) -> None:
    proc = persched(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "example:" in proc.stdout
    assert f"persched {command}" in proc.stdout or f"{command} " in proc.stdout


def test_top_level_help_lists_commands_and_exit_codes() -> None:
    proc = persched("--help")
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command in proc.stdout
    assert "exit codes" in proc.stdout


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["runs", "--limit", "0"], ["runs", "--limit", "x"], ["show"], ["run"], ["jobs", "--nope"]],
)
def test_usage_errors_exit_2_in_one_line(argv: list[str]) -> None:
    assert_one_line_error(persched(*argv), 2, "persched")


# -- migrate ------------------------------------------------------------------------


def test_migrate_creates_the_database_and_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    first = persched("--db", str(db), "migrate")
    assert first.returncode == 0, first.stderr
    assert "upgraded from empty" in first.stdout
    assert db.exists()
    assert oct(db.stat().st_mode & 0o777) == oct(0o600)
    second = persched("migrate", "--db", f"sqlite:///{db}")
    assert second.returncode == 0, second.stderr
    assert "already at revision" in second.stdout


def test_db_comes_from_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "env.db"
    proc = persched("migrate", env={"PERSCHED_DB": str(db)})
    assert proc.returncode == 0, proc.stderr
    assert db.exists()


def test_default_db_is_persched_db_in_the_current_directory(tmp_path: Path) -> None:
    proc = persched("migrate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "persched.db").exists()


# -- jobs / show / runs ---------------------------------------------------------


def test_jobs_prints_an_aligned_table(seeded: str) -> None:
    proc = persched("--db", seeded, "jobs")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0]
    for column in ("ID", "TARGET", "SCHEDULE", "NEXT RUN (UTC)", "WHEN", "STATE", "LAST", "RUNS", "ERRORS"):
        assert column in header
    assert lines[-1].startswith("no scheduler is alive for namespace 'default'")  # its seeding scheduler is gone
    by_id = {line.split()[0]: line for line in lines[1:-1]}
    assert set(by_id) == {"fast", "report", "flaky"}
    assert "every 250 ms" in by_id["fast"]
    assert "every 5 min" in by_id["report"]
    assert "every 1 min" in by_id["flaky"]
    assert "tests.support.cli_jobs:noop" in by_id["fast"]
    # Aligned: every column starts at the same offset in every line.
    state_at = header.index("STATE")
    assert all(line[state_at:].startswith("scheduled") for line in lines[1:-1])
    flaky = by_id["flaky"].split()
    assert flaky[-3:] == ["error", "1", "1"]
    # The seeded clock is in 2027: "in ..." from now, with its UTC instant.
    assert "2027-01-15T08:" in by_id["report"]
    assert " in " in by_id["report"]


def test_jobs_json_has_job_field_names_and_iso_utc_times(seeded: str) -> None:
    proc = persched("jobs", "--json", "--db", seeded)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, list)
    assert {item["job_id"] for item in data} == {"fast", "report", "flaky"}
    for item in data:
        assert set(item) == set(Job.model_fields)
        for key in ("next_run_at", "created_at", "updated_at"):
            parsed = datetime.fromisoformat(item[key].replace("Z", "+00:00"))
            assert parsed.tzinfo is not None
            assert parsed.utcoffset() == timedelta(0)
        Job.model_validate(item)
    flaky = next(item for item in data if item["job_id"] == "flaky")
    assert flaky["args"] == ["flaky says no"]
    assert (flaky["run_count"], flaky["error_count"], flaky["last_outcome"]) == (1, 1, "error")


def test_jobs_on_an_empty_database(tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    assert persched("--db", db, "migrate").returncode == 0
    proc = persched("--db", db, "jobs")
    assert proc.returncode == 0
    assert "no active jobs" in proc.stdout
    assert json.loads(persched("--db", db, "jobs", "--json").stdout) == []


def test_show_prints_the_job_and_its_runs(seeded: str) -> None:
    proc = persched("--db", seeded, "show", "flaky")
    assert proc.returncode == 0, proc.stderr
    assert "tests.support.cli_jobs:fail_always" in proc.stdout
    assert "every 1 min (60 s)" in proc.stdout
    assert "ValueError: flaky says no" in proc.stdout
    assert "1 (1 error) of generation 1, the current definition; last outcome error" in proc.stdout


def test_show_json(seeded: str) -> None:
    proc = persched("--db", seeded, "show", "fast", "--json", "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {*Job.model_fields, "runs"}
    assert data["job_id"] == "fast"
    assert len(data["runs"]) == 2
    assert all(set(run) == set(Run.model_fields) for run in data["runs"])


def test_runs_json_newest_first_with_limit(seeded: str) -> None:
    proc = persched("--db", seeded, "runs", "fast", "--json", "--limit", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data) == 2
    assert all(set(run) == set(Run.model_fields) for run in data)
    assert data[0]["run_id"] > data[1]["run_id"]
    assert all(run["job_id"] == "fast" and run["outcome"] == "ok" for run in data)
    for run in data:
        Run.model_validate(run)
    everything = json.loads(persched("--db", seeded, "runs", "--json").stdout)
    assert {run["job_id"] for run in everything} == {"fast", "flaky"}
    failed = next(run for run in everything if run["job_id"] == "flaky")
    assert failed["outcome"] == "error"
    assert "ValueError: flaky says no" in failed["error"]


def test_runs_table(seeded: str) -> None:
    proc = persched("--db", seeded, "runs")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for column in ("RUN", "JOB", "SCHEDULED FOR (UTC)", "DURATION", "OUTCOME", "INSTANCE", "ERROR"):
        assert column in lines[0]
    assert len(lines) == 1 + len(json.loads(persched("--db", seeded, "runs", "--json").stdout))
    assert any("error" in line and "ValueError: flaky says no" in line for line in lines[1:])


def test_read_commands_change_nothing(seeded: str) -> None:
    before = sql(seeded, "SELECT * FROM persched_jobs ORDER BY job_id")
    for argv in (["jobs"], ["show", "fast"], ["runs"]):
        assert persched("--db", seeded, *argv).returncode == 0
    assert sql(seeded, "SELECT * FROM persched_jobs ORDER BY job_id") == before


# -- deschedule ----------------------------------------------------------------------


def test_deschedule(seeded: str) -> None:
    proc = persched("--db", seeded, "deschedule", "report")
    assert proc.returncode == 0, proc.stderr
    assert "descheduled 'report'" in proc.stdout
    listed = {item["job_id"] for item in json.loads(persched("--db", seeded, "jobs", "--json").stdout)}
    assert listed == {"fast", "flaky"}
    again = persched("--db", seeded, "deschedule", "report")
    assert again.returncode == 0, again.stderr  # already as asked: a no-op, exit 0
    assert "already descheduled; nothing changed" in again.stdout
    # Its history stays readable.
    assert persched("--db", seeded, "runs", "report").returncode == 0


# -- errors: one line, exit 1, never a traceback -----------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["show", "nope"], "no job 'nope'"),
        (["runs", "nope"], "no job 'nope'"),
        (["deschedule", "nope"], "no job 'nope'"),
        (["pause", "nope"], "no job 'nope'"),
        (["resume", "nope"], "no job 'nope'"),
        (["run-now", "nope"], "no job 'nope'"),
    ],
)
def test_unknown_job(seeded: str, argv: list[str], needle: str) -> None:
    assert_one_line_error(persched("--db", seeded, *argv), 1, needle)


@pytest.mark.parametrize("url", ["mysql://u:secret@h/db", "not a url://", "postgresql+nodriver://x/y"])
def test_bad_url(url: str) -> None:
    line = assert_one_line_error(persched("--db", url, "jobs"), 1, "persched: error:")
    assert "secret" not in line


@pytest.mark.parametrize(
    "command",
    [["jobs"], ["show", "x"], ["runs"], ["deschedule", "x"], ["pause", "x"], ["resume", "x"], ["run-now", "x"]],
)
def test_missing_database_is_reported_and_not_created(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "missing.db"
    assert_one_line_error(persched("--db", str(db), *command), 1, "does not exist", "persched migrate")
    assert not db.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["jobs"], ["show", "x"], ["runs"], ["deschedule", "x"], ["migrate"]])
def test_garbage_database_file(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"this is not a database, just some bytes " * 100)
    assert_one_line_error(persched("--db", str(db), *command), 1, "not a SQLite database")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"garbage " * 500)
    proc = persched("--debug", "--db", str(db), "jobs")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("persched: error:")


def test_database_without_schema_is_not_migrated_by_read_commands(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    sql(f"sqlite:///{db}", "CREATE TABLE other (x INTEGER)")
    assert_one_line_error(persched("--db", str(db), "jobs"), 1, "no persched schema", "persched migrate")
    assert sql(f"sqlite:///{db}", "SELECT name FROM sqlite_master WHERE type='table'") == [("other",)]


@pytest.mark.parametrize(
    "command",
    [["jobs"], ["show", "fast"], ["runs"], ["deschedule", "fast"], ["pause", "fast"], ["run-now", "fast"], ["migrate"]],
)
def test_schema_from_the_future(seeded: str, command: list[str]) -> None:
    sql(seeded, "UPDATE persched_alembic_version SET version_num = '9999_from_the_future'")
    assert_one_line_error(persched("--db", seeded, *command), 1, "9999_from_the_future", "upgrade persched")
    assert sql(seeded, "SELECT version_num FROM persched_alembic_version") == [("9999_from_the_future",)]


def test_run_with_a_module_that_does_not_exist(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    proc = persched("--db", str(db), "run", "--import", "no_such_module_here")
    assert_one_line_error(proc, 1, "cannot import module 'no_such_module_here'", "ModuleNotFoundError")


def test_run_with_a_module_that_raises_on_import(tmp_path: Path) -> None:
    (tmp_path / "broken_jobs.py").write_text("raise RuntimeError('broken at import')\n")
    proc = persched("--db", str(tmp_path / "run.db"), "run", "--import", "broken_jobs", cwd=tmp_path)
    assert_one_line_error(proc, 1, "broken_jobs", "RuntimeError: broken at import")


def test_run_with_a_setup_hook_that_raises(tmp_path: Path) -> None:
    (tmp_path / "bad_setup.py").write_text("def persched_setup(scheduler):\n    raise KeyError('no config')\n")
    proc = persched("--db", str(tmp_path / "run.db"), "run", "--import", "bad_setup", cwd=tmp_path, timeout=TIMEOUT * 3)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("persched: error: bad_setup.persched_setup() raised KeyError")


# -- run: graceful stop -------------------------------------------------------------


def _start_run(tmp_path: Path, sleep_seconds: float) -> tuple[subprocess.Popen[str], Path, str]:
    """Start `persched run` on the slow job; its stderr goes to ``markers/stderr.log``."""
    markers = tmp_path / "markers"
    markers.mkdir()
    db = tmp_path / "run.db"
    with (markers / "stderr.log").open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "persched", "--db", str(db), "run", "--import", "tests.support.cli_jobs"],
            cwd=REPO,
            env=cli_env({cli_jobs.MARKERS_ENV: str(markers), cli_jobs.SLEEP_ENV: str(sleep_seconds)}),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    return proc, markers, f"sqlite:///{db}"


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(TIMEOUT)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"persched run exited early with {proc.returncode}")
        return path.exists()

    wait_until(ready, timeout=RUN_TIMEOUT, message=f"{path.name} marker")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_run_stops_gracefully_and_lets_the_run_in_flight_finish(tmp_path: Path, sig: signal.Signals) -> None:
    proc, markers, url = _start_run(tmp_path, sleep_seconds=1.0)
    try:
        _wait_for(markers / "started", proc)
        assert not (markers / "done").exists()
        proc.send_signal(sig)
        proc.wait(RUN_TIMEOUT)
    finally:
        _stop(proc)
    stderr = (markers / "stderr.log").read_text()
    assert proc.returncode == 0, stderr
    assert (markers / "done").exists()
    assert "Traceback" not in stderr
    assert f"{sig.name} received" in stderr
    assert "persched stopped" in stderr
    runs = json.loads(persched("--db", url, "runs", "slow", "--json").stdout)
    assert [run["outcome"] for run in runs] == ["ok"]
    assert sql(url, "SELECT state FROM persched_jobs WHERE job_id = 'slow'") == [("scheduled",)]


def _to_another_thread(pid: int, sig: signal.Signals) -> None:
    """Deliver `sig` to a thread of process `pid` other than its main thread (the kernel may do so itself)."""
    tid = next(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig.name})")


@pytest.mark.parametrize("second_to", ["the process", "another thread"])
def test_second_signal_forces_exit(tmp_path: Path, second_to: str) -> None:
    proc, markers, _ = _start_run(tmp_path, sleep_seconds=60.0)
    try:
        _wait_for(markers / "started", proc)
        proc.send_signal(signal.SIGTERM)
        # Wait until the first signal was handled (two pending ones would merge into one).
        log = markers / "stderr.log"
        wait_until(lambda: "SIGTERM received" in log.read_text(), timeout=RUN_TIMEOUT, message="first signal")
        started = time.monotonic()
        if second_to == "the process":
            proc.send_signal(signal.SIGTERM)
        else:  # its handler runs only once the main thread, waiting for the job, is back in Python
            _to_another_thread(proc.pid, signal.SIGTERM)
        proc.wait(RUN_TIMEOUT)
        assert time.monotonic() - started < 30  # well before the 60 s job would have ended
    finally:
        _stop(proc)
    stderr = (markers / "stderr.log").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "second signal" in stderr
    assert not (markers / "done").exists()


# -- demo: tests/integration/test_cli_operator.py runs it (once: it takes about 10 s) -------
