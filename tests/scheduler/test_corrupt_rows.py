"""A row edited by hand into something unreadable costs only its own job.

Whoever can write the database can put anything in any column (SQLite's type
affinity lets text into a numeric column). Such a row is reported on its own
job: `jobs()` lists it with `Job.unreadable` saying why, `persched jobs` shows
it as "unreadable", and a job that comes due with it is paused with an
"error" record. `start()`, the listings and every other job carry on, and
the row is never deleted; scheduling the id again with a valid definition
replaces it.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler, JobState
from persched._model.instant import Instant, Micros, from_datetime
from persched._store import ClaimMiss
from persched.cli import main as cli_main
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import finished_runs, sql, wait_until
from tests.support.postgres import pg_schema
from tests.support.seams import store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import SchedulerFactory

GOOD = [f"good{i}" for i in range(5)]

# (column, SQL value): each one made start(), jobs() or the dispatch of every job fail.
CORRUPTIONS = [
    ("next_run_at", "'2026-01-01 00:00:00.000000+02:00'"),  # an offset: SQL compares the text wrongly
    ("next_run_at", "'garbage'"),
    ("next_run_at", "12345"),
    ("run_now_at", "'soon'"),
    ("first_run_at", "'x'"),
    ("end_at", "'x'"),
    ("created_at", "'yesterday'"),
    ("args", "'not json'"),
    ("args", "'{\"a\": 1}'"),  # JSON, but not an array
    ("kwargs", "'[1]'"),
    ("state", "'bogus'"),
    ("generation", "'two'"),
    ("generation", "1.5"),
    ("interval_seconds", "'ten'"),
    ("jitter_seconds", "'x'"),
    ("run_count", "'many'"),
    ("paused", "'yes'"),
]
IDS = [f"{column}={value}" for column, value in CORRUPTIONS]


def _schedule_all(sched: JobScheduler) -> None:
    for job_id in GOOD:
        sched.schedule(job_id, jobs.record, 1.0, args=(job_id,))
    sched.schedule("bad", jobs.record, 1.0, args=("bad",))


def _edit(url: str, column: str, value: str) -> None:
    sql(url, f"UPDATE persched_jobs SET {column} = {value} WHERE job_id = 'bad'")  # noqa: S608 - test data


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _good_runs_each(sched: JobScheduler, n: int) -> bool:
    return all(len(finished_runs(sched, job_id)) >= n for job_id in GOOD)


def _rounds(sched: JobScheduler, clock: FakeClock, rounds: range) -> None:
    """Advance one interval per round; each good job finishes one more run each time."""
    for n in rounds:
        clock.advance(1.0)
        wait_until(lambda: _good_runs_each(sched, n), message=f"round {n} of the good jobs")  # noqa: B023 - waited on here


@pytest.mark.parametrize(("column", "value"), CORRUPTIONS, ids=IDS)
def test_a_row_edited_before_start_costs_only_its_job(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, column: str, value: str
) -> None:
    first = make_scheduler()
    _schedule_all(first)
    first.shutdown()
    _edit(make_scheduler.url, column, value)
    raw_before = sql(make_scheduler.url, f"SELECT {column} FROM persched_jobs WHERE job_id = 'bad'")  # noqa: S608

    sched = make_scheduler(start=True)  # used to raise TypeError / ValueError
    _rounds(sched, fake_clock, range(1, 4))

    listed = {job.job_id: job for job in sched.jobs()}  # used to fail for every job
    assert set(listed) == {*GOOD, "bad"}
    assert all(listed[job_id].unreadable is None for job_id in GOOD)
    bad = sched.get_job("bad")
    assert bad is not None
    if column != "run_count":  # a run's `run_count + 1` may have turned 'many' into a number since
        assert bad.unreadable is not None
        assert column in bad.unreadable, bad.unreadable
    assert sql(make_scheduler.url, "SELECT count(*) FROM persched_jobs WHERE job_id = 'bad'") == [(1,)]
    if not finished_runs(sched, "bad"):  # never claimed: the row is exactly as the operator left it
        assert sql(make_scheduler.url, f"SELECT {column} FROM persched_jobs WHERE job_id = 'bad'") == raw_before  # noqa: S608
    assert jobs.calls("bad") == [] or column in ("created_at", "run_count")  # these do not stop a run

    code, out, err = _cli("--db", make_scheduler.url, "jobs")
    assert (code, err) == (0, "")
    assert all(job_id in out for job_id in [*GOOD, "bad"])
    code, out, err = _cli("--db", make_scheduler.url, "jobs", "--json")
    assert (code, err) == (0, "")
    assert {j["job_id"] for j in json.loads(out)} == {*GOOD, "bad"}
    code, out, err = _cli("--db", make_scheduler.url, "show", "bad")
    assert (code, err) == (0, "")

    # The way out: schedule it again with a valid definition.
    fixed = sched.schedule("bad", jobs.record, 1.0, args=("bad", "fixed"))
    assert fixed.unreadable is None
    if sched.get_job("bad") is not None and sched.get_job("bad").paused:  # type: ignore[union-attr]  # checked
        sched.resume("bad")
    fake_clock.advance(1.0)
    wait_until(lambda: any(c.args == ("fixed",) for c in jobs.calls("bad")), message="the fixed job ran")


def test_an_unreadable_row_shows_as_such_in_the_cli(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    _schedule_all(sched)
    _edit(make_scheduler.url, "next_run_at", "'garbage'")
    code, out, _ = _cli("--db", make_scheduler.url, "jobs")
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("bad ")]
    assert "unreadable" in line
    code, out, _ = _cli("--db", make_scheduler.url, "show", "bad")
    assert code == 0
    assert "next_run_at: 'garbage' is not a timestamp" in out


@pytest.mark.parametrize(
    ("column", "value"),
    [("first_run_at", "'x'"), ("end_at", "'x'"), ("next_run_at", "'x'"), ("generation", "'two'")],
    ids=["first_run_at", "end_at", "next_run_at", "generation"],
)
def test_a_row_edited_while_scheduled_costs_only_its_job(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, column: str, value: str
) -> None:
    """The heap already holds the job: its claim (in a batch with the others) settles it alone."""
    sched = make_scheduler(start=True)
    _schedule_all(sched)
    _edit(make_scheduler.url, column, value)
    _rounds(sched, fake_clock, range(1, 4))
    assert jobs.calls("bad") == []
    bad = sched.get_job("bad")
    assert bad is not None
    assert bad.unreadable is not None
    assert column in bad.unreadable
    # A claim that reads the row pauses the job and says why; an unreadable generation or
    # next_run_at fails the claim's own predicate, and the listing above is the report.
    if column in ("first_run_at", "end_at"):
        wait_until(lambda: len(sched.runs("bad")) == 1, message="the bad job's error record")
        (record,) = sched.runs("bad")
        assert record.outcome == "error"
        assert record.error is not None
        assert "stored row cannot be read" in record.error
        assert column in record.error
        paused = sched.get_job("bad")
        assert paused is not None
        assert paused.paused
    assert sql(make_scheduler.url, "SELECT count(*) FROM persched_jobs WHERE job_id = 'bad'") == [(1,)]


def test_a_row_edited_while_its_run_is_in_flight_costs_only_its_job(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    """The edited job's run is recorded, and the job is then settled alone: by its next claim, which
    finds the row unreadable, or already by the completion when the cycle's completions were read
    again (one of them found its row moved), whichever comes first."""
    sched = make_scheduler(start=True)
    for job_id in GOOD:
        sched.schedule(job_id, jobs.record, 1.0, args=(job_id,))
    sched.schedule("bad", jobs.block, 1.0, args=("bad",))
    fake_clock.advance(1.0)
    gate = jobs.gate("bad")
    assert gate.started.wait(10), "the bad job started"
    _edit(make_scheduler.url, "first_run_at", "'x'")
    gate.release.set()
    wait_until(lambda: "ok" in [r.outcome for r in sched.runs("bad")], message="the bad job's run recorded")
    _rounds(sched, fake_clock, range(2, 5))  # paused by now, with a record saying why
    assert [r.outcome for r in sched.runs("bad")] == ["error", "ok"]  # newest first
    bad = sched.get_job("bad")
    assert bad is not None
    assert bad.paused


@pytest.mark.parametrize(("column", "value"), [("first_run_at", "'x'"), ("interval_seconds", "'ten'")])
def test_an_entry_that_loses_its_claim_on_an_unreadable_waiting_row_settles_it(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, column: str, value: str
) -> None:
    """A stale entry (its slot before the row's) loses its claim; when the row it finds cannot be
    read, it settles it as a won row's read does, since it may be the last entry of that job: paused,
    with an "error" record saying why. Dropping it silently left the job waiting for ever."""
    sched = make_scheduler()
    sched.schedule("bad", jobs.record, 1.0, args=("bad",))
    job = sched.get_job("bad")
    assert job is not None
    _edit(make_scheduler.url, column, value)
    now = Instant(from_datetime(job.next_run_at) + 1)
    stale = Instant(from_datetime(job.next_run_at) - 1_000_000)
    miss = claim_one(store_of(sched), "bad", job.generation, stale, now, "me", Micros(30_000_000))
    assert isinstance(miss, ClaimMiss)
    (record,) = sched.runs("bad")
    assert record.outcome == "error"
    assert record.error is not None
    assert column in record.error
    assert sql(make_scheduler.url, "SELECT paused, state FROM persched_jobs WHERE job_id = 'bad'") == [(1, "scheduled")]
    again = claim_one(store_of(sched), "bad", job.generation, stale, now, "me", Micros(30_000_000))
    assert isinstance(again, ClaimMiss)
    assert len(sched.runs("bad")) == 1  # settled once: paused, it is left alone


def test_resume_and_run_now_of_an_unreadable_row_say_what_to_fix(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    _schedule_all(sched)
    sched.pause("bad")
    _edit(make_scheduler.url, "created_at", "'x'")
    with pytest.raises(InvalidJobError, match="created_at") as raised:
        sched.resume("bad")
    assert raised.value.argument == "job_id"
    with pytest.raises(InvalidJobError, match="created_at"):
        sched.run_now("bad")
    assert sched.deschedule("bad") is True


@pytest.mark.parametrize(
    ("column", "value"),
    [("outcome", "'weird'"), ("scheduled_for", "'x'"), ("generation", "'two'"), ("overran", "7")],
    ids=["outcome", "scheduled_for", "generation", "overran"],
)
def test_an_unreadable_run_record_is_listed_alone(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, column: str, value: str
) -> None:
    sched = make_scheduler(start=True)
    _schedule_all(sched)
    fake_clock.advance(1.0)
    wait_until(lambda: _good_runs_each(sched, 1) and len(finished_runs(sched, "bad")) == 1, message="one round")
    sql(make_scheduler.url, f"UPDATE persched_runs SET {column} = {value} WHERE job_id = 'bad'")  # noqa: S608
    every = sched.runs()  # used to fail for every run
    assert len(every) == 6
    (bad,) = [r for r in every if r.job_id == "bad"]
    assert bad.unreadable is not None
    assert column in bad.unreadable
    assert all(r.unreadable is None for r in every if r.job_id != "bad")
    code, out, err = _cli("--db", make_scheduler.url, "runs", "--json")
    assert (code, err) == (0, "")
    assert len(json.loads(out)) == 6


@pytest.mark.postgres
def test_postgres_rows_edited_into_unreadable_text_cost_only_their_job(tmp_path: Path) -> None:
    """PostgreSQL's column types refuse most bad values; text columns still take anything."""
    with pg_schema("corrupt") as url:
        clock = FakeClock(1_700_000_000.123457)
        sched = JobScheduler(url, clock=clock)
        try:
            _schedule_all(sched)
            sched.schedule("bad2", jobs.record, 1.0, args=("bad2",))
            sched.schedule("bad3", jobs.record, 1.0, args=("bad3",))
            engine = store_of(sched).engine
            with engine.begin() as conn:
                conn.exec_driver_sql("UPDATE persched_jobs SET args = 'not json' WHERE job_id = 'bad'")
                conn.exec_driver_sql("UPDATE persched_jobs SET state = 'bogus' WHERE job_id = 'bad2'")
                conn.exec_driver_sql("UPDATE persched_jobs SET kwargs = '[1]' WHERE job_id = 'bad3'")
            sched.start()
            clock.advance(1.0)
            wait_until(lambda: _good_runs_each(sched, 1), message="the good jobs ran")
            listed = {job.job_id: job for job in sched.jobs()}
            assert {job_id for job_id, job in listed.items() if job.unreadable} == {"bad", "bad2", "bad3"}
            assert listed["bad2"].state == JobState.PAUSED
            with engine.begin() as conn:
                conn.exec_driver_sql("UPDATE persched_runs SET outcome = 'weird' WHERE job_id = 'good0'")
            (run,) = sched.runs("good0")
            assert run.unreadable is not None
            assert "outcome" in run.unreadable
            assert len(sched.runs()) >= 5
        finally:
            sched.shutdown()


@pytest.mark.parametrize(
    ("column", "value"),
    [("args", "'{\"a\": 1}'"), ("kwargs", "'[1]'"), ("args", "'not json'")],
    ids=["args-object", "kwargs-array", "args-not-json"],
)
def test_stored_arguments_of_the_wrong_shape_are_never_passed(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, column: str, value: str
) -> None:
    """f(*{"a": 1}) would call f("a"): the run is an error that says why, and nothing is called."""
    sched = make_scheduler(start=True)
    _schedule_all(sched)
    _edit(make_scheduler.url, column, value)
    _rounds(sched, fake_clock, range(1, 3))
    wait_until(lambda: len(finished_runs(sched, "bad")) == 2, message="the bad job's runs")
    assert all(r.outcome == "error" and r.error is not None and column in r.error for r in finished_runs(sched, "bad"))
    assert jobs.calls("bad") == []
    assert jobs.calls("a") == []  # what f(*{"a": 1}) would have recorded
