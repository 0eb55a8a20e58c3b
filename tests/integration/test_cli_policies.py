"""The command line over docs/how-to/schedules.md: schedules in words, policies, pause/resume/run-now, missed runs.

Like ``test_cli.py`` (whose helpers run ``python -m persched`` as a subprocess),
each test drives the CLI as a user would; the databases are seeded in-process
through the public API with a FakeClock, and what the CLI changed is read back
through `JobScheduler`.
"""

from __future__ import annotations

import json
from datetime import date
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, insert

from persched import Job, JobState, Run
from persched._store.schema import runs as runs_table
from tests.integration.test_cli import assert_one_line_error
from tests.support import cli_jobs
from tests.support.cli_run import persched
from tests.support.helpers import at, finished_runs, sql, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.slow

EN_DASH = "\u2013"


@pytest.fixture
def policies_db(make_scheduler: SchedulerFactory, sqlite_url: str) -> str:
    """A database (FakeClock at 2027-01-15T08:00:00Z) with one job per kind of schedule, one of them paused."""
    sched = make_scheduler()
    sched.schedule("every5", cli_jobs.noop, 300.0)
    sched.schedule("nightly", cli_jobs.noop, cron="0 3 * * *", timezone="Europe/Paris", misfire="skip")
    sched.schedule("utc-cron", cli_jobs.noop, cron="*/15 * * * *")
    sched.schedule(
        "delayed",
        cli_jobs.noop,
        60.0,
        recurrence="fixed_delay",
        grace_seconds=5.0,
        overlap="skip",
        jitter_seconds=2.0,
        max_runtime_seconds=600.0,
        on_overrun="stop",
        executor="process",
        stop_grace_seconds=0.5,
    )
    sched.schedule(
        "windowed",
        cli_jobs.noop,
        10.0,
        misfire="catch_up",
        max_catch_up=3,
        start_at=at(3600),
        end_at=at(7200),
        exclude=["2027-12-24/2027-12-26", date(2028, 1, 1)],
    )
    sched.schedule("held", cli_jobs.noop, 30.0)
    assert sched.pause("held")
    # A window entirely in the past: finished as soon as it is scheduled.
    done = sched.schedule("done", cli_jobs.noop, 10.0, start_at=at(-100), end_at=at(-50))
    assert done.state == JobState.FINISHED
    sched.shutdown()
    return sqlite_url


def _rows(stdout: str) -> tuple[str, dict[str, str]]:
    """The header of a table and its lines by first cell."""
    # `persched jobs` ends with a line saying that no scheduler runs these jobs: not a row.
    lines = [line for line in stdout.splitlines() if not line.startswith("no scheduler is alive")]
    return lines[0], {line.split()[0]: line for line in lines[1:]}


def _cell(header: str, line: str, column: str) -> str:
    """The text of `line` under `column` up to the next column (the table is left-aligned)."""
    start = header.index(column)
    rest = header[start + len(column) :]
    stripped = rest.lstrip()
    end = start + len(column) + (len(rest) - len(stripped)) if stripped else len(line)
    return line[start:end].strip()


def _job(make_scheduler: SchedulerFactory, job_id: str) -> Job:
    job = make_scheduler().get_job(job_id)
    assert job is not None
    return job


# -- jobs / show ---------------------------------------------------------------------


def test_jobs_table_shows_the_schedule_in_words_and_the_state(policies_db: str) -> None:
    proc = persched("--db", policies_db, "jobs")
    assert proc.returncode == 0, proc.stderr
    header, by_id = _rows(proc.stdout)
    assert "SCHEDULE" in header
    assert "INTERVAL" not in header
    assert set(by_id) == {"every5", "nightly", "utc-cron", "delayed", "windowed", "held", "done"}
    schedule = {job_id: _cell(header, line, "SCHEDULE") for job_id, line in by_id.items()}
    assert schedule["every5"] == "every 5 min"
    assert schedule["nightly"] == "cron 0 3 * * * Europe/Paris"
    assert schedule["utc-cron"] == "cron */15 * * * *"
    assert schedule["delayed"] == "every 1 min after each run ends"
    state = {job_id: _cell(header, line, "STATE") for job_id, line in by_id.items()}
    assert state["held"] == "paused"
    assert state["done"] == "finished"
    assert state["every5"] == "scheduled"
    # A paused or finished job has no next run to announce.
    for job_id in ("held", "done"):
        assert _cell(header, by_id[job_id], "NEXT RUN (UTC)") == "-"
    # 03:00 in Paris (UTC+1 in January) is 02:00 UTC, the day after the seeded 08:00.
    assert _cell(header, by_id["nightly"], "NEXT RUN (UTC)") == "2027-01-16T02:00:00Z"


def test_jobs_json_has_every_job_field_with_its_value(policies_db: str) -> None:
    proc = persched("--db", policies_db, "jobs", "--json")
    assert proc.returncode == 0, proc.stderr
    data = {item["job_id"]: item for item in json.loads(proc.stdout)}
    for item in data.values():
        assert set(item) == set(Job.model_fields)
        Job.model_validate(item)
    nightly = data["nightly"]
    assert (nightly["cron"], nightly["timezone"], nightly["interval_seconds"]) == ("0 3 * * *", "Europe/Paris", None)
    assert (nightly["misfire"], nightly["schedule"]) == ("skip", "cron 0 3 * * * Europe/Paris")
    assert nightly["next_run_at"] == "2027-01-16T02:00:00Z"
    delayed = data["delayed"]
    assert delayed["recurrence"] == "fixed_delay"
    assert (delayed["grace_seconds"], delayed["overlap"], delayed["jitter_seconds"]) == (5.0, "skip", 2.0)
    assert delayed["max_runtime_seconds"] == 600.0
    assert (delayed["on_overrun"], delayed["executor"], delayed["stop_grace_seconds"]) == ("stop", "process", 0.5)
    assert (nightly["on_overrun"], nightly["executor"], nightly["stop_grace_seconds"]) == ("warn", "thread", 5.0)
    windowed = data["windowed"]
    assert (windowed["misfire"], windowed["max_catch_up"]) == ("catch_up", 3)
    assert (windowed["start_at"], windowed["end_at"]) == ("2027-01-15T09:00:00Z", "2027-01-15T10:00:00Z")
    assert windowed["exclude"] == ["2027-12-24/2027-12-26", "2028-01-01"]
    assert data["every5"]["exclude"] is None
    assert (data["held"]["paused"], data["held"]["state"]) == (True, "paused")
    assert data["done"]["state"] == "finished"
    every5 = data["every5"]
    assert (every5["interval_seconds"], every5["cron"], every5["timezone"]) == (300.0, None, "UTC")
    assert (every5["paused"], every5["run_now_requested"], every5["misfire"]) == (False, False, "coalesce")


def test_show_a_cron_job_in_its_time_zone(policies_db: str) -> None:
    proc = persched("--db", policies_db, "show", "nightly")
    assert proc.returncode == 0, proc.stderr
    assert "cron 0 3 * * * Europe/Paris" in proc.stdout
    assert "misfire" in proc.stdout
    assert "skip" in proc.stdout
    # Only what differs from the defaults is listed.
    for name in ("recurrence", "grace", "overlap", "jitter", "window", "max runtime"):
        assert not any(line.startswith(name) for line in proc.stdout.splitlines()), name
    utc = persched("--db", policies_db, "show", "utc-cron")
    assert "cron */15 * * * * (UTC)" in utc.stdout


def test_show_lists_each_policy_that_differs_from_its_default(policies_db: str) -> None:
    proc = persched("--db", policies_db, "show", "delayed")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split("  ")[0]: line for line in proc.stdout.splitlines() if line}
    assert "every 1 min after each run ends" in lines["schedule"]
    assert "fixed_delay" in lines["recurrence"]
    assert "5 s" in lines["grace"]
    assert "skip" in lines["overlap"]
    assert "2 s" in lines["jitter"]
    assert "10 min" in lines["max runtime"]
    assert "misfire" not in lines
    windowed = persched("--db", policies_db, "show", "windowed").stdout
    assert "catch_up, at most 3" in windowed
    assert "from 2027-01-15T09:00:00Z until 2027-01-15T10:00:00Z" in windowed
    assert "excluded    2027-12-24/2027-12-26, 2028-01-01 (no slot on these dates, in UTC)\n" in windowed
    plain = persched("--db", policies_db, "show", "every5").stdout
    assert "every 5 min (300 s)" in plain
    for name in ("recurrence", "misfire", "grace", "overlap", "jitter", "window", "max runtime", "excluded"):
        assert not any(line.startswith(name) for line in plain.splitlines()), name


def test_show_and_jobs_json_give_the_failure_count(make_scheduler: SchedulerFactory, sqlite_url: str) -> None:
    sched = make_scheduler()
    sched.schedule("watched", cli_jobs.noop, 60.0, pause_after_failures=5)
    sched.shutdown()
    shown = persched("--db", sqlite_url, "show", "watched")
    assert shown.returncode == 0, shown.stderr
    assert "pause after  5 failed slots in a row (0 so far; a success or a resume clears them)\n" in shown.stdout
    (listed,) = json.loads(persched("--db", sqlite_url, "jobs", "--json").stdout)
    assert (listed["pause_after_failures"], listed["failure_streak"]) == (5, 0)
    plain = persched("--db", sqlite_url, "show", "watched", "--json").stdout
    assert json.loads(plain)["pause_after_failures"] == 5


def test_show_a_paused_job(policies_db: str) -> None:
    proc = persched("--db", policies_db, "show", "held")
    assert proc.returncode == 0, proc.stderr
    state = next(line for line in proc.stdout.splitlines() if line.startswith("state"))
    assert state.split()[1:] == ["paused"]
    assert "persched resume held" in proc.stdout


# -- pause / resume / run-now -----------------------------------------------------


def test_pause_then_resume(policies_db: str, make_scheduler: SchedulerFactory) -> None:
    paused = persched("--db", policies_db, "pause", "every5")
    assert paused.returncode == 0, paused.stderr
    assert "paused 'every5'" in paused.stdout
    job = _job(make_scheduler, "every5")
    assert (job.paused, job.state) == (True, JobState.PAUSED)
    header, by_id = _rows(persched("--db", policies_db, "jobs").stdout)
    assert _cell(header, by_id["every5"], "STATE") == "paused"

    again = persched("--db", policies_db, "pause", "every5")
    assert again.returncode == 0, again.stderr
    assert "already paused" in again.stdout
    assert again.stderr == ""

    resumed = persched("--db", policies_db, "resume", "every5")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed 'every5'" in resumed.stdout
    job = _job(make_scheduler, "every5")
    assert (job.paused, job.state) == (False, JobState.SCHEDULED)

    not_paused = persched("--db", policies_db, "resume", "every5")
    assert not_paused.returncode == 0, not_paused.stderr
    assert "not paused" in not_paused.stdout


def test_pause_of_a_finished_job_changes_nothing(policies_db: str, make_scheduler: SchedulerFactory) -> None:
    proc = persched("--db", policies_db, "pause", "done")
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout
    job = _job(make_scheduler, "done")
    assert (job.paused, job.state) == (False, JobState.FINISHED)


def test_run_now_sets_run_now_requested(policies_db: str, make_scheduler: SchedulerFactory) -> None:
    before = _job(make_scheduler, "every5")
    proc = persched("--db", policies_db, "run-now", "every5")
    assert proc.returncode == 0, proc.stderr
    assert "run-now requested for 'every5'" in proc.stdout
    after = _job(make_scheduler, "every5")
    assert after.run_now_requested
    assert (after.next_run_at, after.generation) == (before.next_run_at, before.generation)  # the grid stays
    again = persched("--db", policies_db, "run-now", "every5")
    assert again.returncode == 0, again.stderr
    assert "already pending" in again.stdout
    header, by_id = _rows(persched("--db", policies_db, "jobs").stdout)
    assert _cell(header, by_id["every5"], "STATE") == "scheduled, run-now pending"
    assert "run-now pending" in persched("--db", policies_db, "show", "every5").stdout


@pytest.mark.parametrize(("job_id", "needle"), [("held", "paused"), ("done", "finished")])
def test_run_now_of_a_paused_or_finished_job_is_refused(
    policies_db: str, make_scheduler: SchedulerFactory, job_id: str, needle: str
) -> None:
    proc = persched("--db", policies_db, "run-now", job_id)
    assert_one_line_error(proc, 1, f"'{job_id}'", needle)
    assert proc.stdout == ""
    assert not _job(make_scheduler, job_id).run_now_requested


def test_run_now_of_a_running_job_with_overlap_skip_is_dropped(
    policies_db: str, make_scheduler: SchedulerFactory
) -> None:
    # As if a scheduler elsewhere were running it ("delayed" has overlap="skip").
    sql(policies_db, "UPDATE persched_jobs SET state = 'running' WHERE job_id = 'delayed'")
    assert_one_line_error(persched("--db", policies_db, "run-now", "delayed"), 1, "'delayed'", "overlap", "dropped")
    assert not _job(make_scheduler, "delayed").run_now_requested


@pytest.mark.parametrize("command", ["pause", "resume", "run-now"])
def test_unknown_or_descheduled_job(policies_db: str, command: str) -> None:
    assert_one_line_error(persched("--db", policies_db, command, "nope"), 1, "no job 'nope'")
    assert persched("--db", policies_db, "deschedule", "every5").returncode == 0
    assert_one_line_error(persched("--db", policies_db, command, "every5"), 1, "'every5'", "descheduled")


@pytest.mark.parametrize("command", ["pause", "resume", "run-now"])
def test_write_commands_have_help_and_never_create_a_database(tmp_path: Path, command: str) -> None:
    proc = persched(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"persched {command} " in proc.stdout
    assert "exits 1" in proc.stdout  # the exit-code decision is in the help
    db = tmp_path / "missing.db"
    assert_one_line_error(persched("--db", str(db), command, "x"), 1, "does not exist", "persched migrate")
    assert not db.exists()


def test_top_level_help_lists_the_new_commands() -> None:
    proc = persched("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("pause", "resume", "run-now"):
        assert command in proc.stdout


# -- runs: missed records, overran ------------------------------------------------


def test_runs_show_a_missed_range_and_an_overrun(policies_db: str) -> None:
    engine = create_engine(policies_db)
    try:
        with engine.begin() as conn:
            common = {"job_id": "every5", "generation": 1, "instance_id": "host:1:abc"}
            conn.execute(
                insert(runs_table).values(
                    **common,
                    scheduled_for=at(0),
                    missed_until=at(660),
                    missed_count=12,
                    started_at=at(700),
                    finished_at=at(700),
                    outcome="missed",
                )
            )
            conn.execute(
                insert(runs_table).values(
                    **common,
                    scheduled_for=at(720),
                    missed_until=None,
                    missed_count=1,
                    started_at=at(721),
                    finished_at=at(721),
                    outcome="missed",
                )
            )
            conn.execute(
                insert(runs_table).values(
                    **common,
                    scheduled_for=at(900),
                    started_at=at(900),
                    finished_at=at(1900),
                    outcome="ok",
                    overran=True,
                )
            )
    finally:
        engine.dispose()
    proc = persched("--db", policies_db, "runs", "every5")
    assert proc.returncode == 0, proc.stderr
    header, by_id = _rows(proc.stdout)
    outcomes = [_cell(header, line, "OUTCOME") for line in by_id.values()]
    assert outcomes == ["ok, overran", "missed 1 slot 08:12:00", f"missed 12 slots 08:00:00{EN_DASH}08:11:00"]
    assert _cell(header, by_id["1"], "DURATION") == "-"  # a missed record never ran
    shown = persched("--db", policies_db, "show", "every5")
    assert f"missed 12 slots 08:00:00{EN_DASH}08:11:00" in shown.stdout
    assert "ok, overran" in shown.stdout
    data = json.loads(persched("--db", policies_db, "runs", "every5", "--json").stdout)
    assert all(set(run) == set(Run.model_fields) for run in data)
    missed = data[-1]
    assert (missed["outcome"], missed["missed_count"]) == ("missed", 12)
    assert (missed["scheduled_for"], missed["missed_until"]) == ("2027-01-15T08:00:00Z", "2027-01-15T08:11:00Z")
    assert data[0]["overran"] is True


def test_a_missed_range_recorded_by_the_scheduler_shows_in_runs(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str
) -> None:
    sched = make_scheduler()
    sched.schedule("skipper", cli_jobs.noop, 10.0, misfire="skip", start_in=0)
    fake_clock.advance(100.0)  # down for 100 s: the slots 08:00:00 .. 08:01:30 pass unrun
    sched.start()
    wait_until(lambda: any(r.outcome == "missed" for r in finished_runs(sched, "skipper")), message="missed record")
    missed = next(r for r in finished_runs(sched, "skipper") if r.outcome == "missed")
    sched.shutdown()
    assert missed.missed_count is not None
    assert missed.missed_until is not None
    proc = persched("--db", sqlite_url, "runs", "skipper")
    assert proc.returncode == 0, proc.stderr
    first, last = missed.scheduled_for, missed.missed_until
    expected = f"missed {missed.missed_count} slots {first:%H:%M:%S}{EN_DASH}{last:%H:%M:%S}"
    assert expected in proc.stdout
    assert first == at(0)
    assert sql(sqlite_url, "SELECT count(*) FROM persched_runs WHERE outcome = 'missed'") == [(1,)]
