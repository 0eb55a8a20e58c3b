"""The command line as an operator meets it, through the real console script.

Each test runs ``python -m persched`` in a subprocess: the demo on a database
of its own, a closed pipe, tables fitted to a terminal (``COLUMNS`` and a
real pty), durations and plurals, one exit-code rule for the verbs, messages
for a directory as the database, and the samples in the docs.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from tests.support import cli_jobs, jobs
from tests.support.cli_run import REPO, RUN_TIMEOUT, cli_env, persched
from tests.support.helpers import TIMEOUT, finished_runs, sql, wait_started, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.slow


@pytest.fixture
def seeded(make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str) -> str:
    """Jobs with long targets and errors, a few runs each: wider than 80 columns in full."""
    sched = make_scheduler(start=True, workers=2)
    sched.schedule("invoices-sync", cli_jobs.fail_always, 60.0, args=("upstream refused: 503 " * 4,), start_in=0)
    sched.schedule("report", cli_jobs.noop, 300.0, start_in=0)
    wait_until(lambda: len(finished_runs(sched, "invoices-sync")) == 1, message="invoices run")
    wait_until(lambda: len(finished_runs(sched, "report")) == 1, message="report run")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return sqlite_url


def _job_row(url: str, job_id: str) -> list[tuple[object, ...]]:
    return sql(url, "SELECT target, generation, state, paused FROM persched_jobs WHERE job_id = ?", (job_id,))


# -- demo ------------------------------------------------------------------------------


def test_demo_ends_by_itself_on_a_database_of_its_own(seeded: str, tmp_path: Path) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert persched("--db", other, "migrate").returncode == 0
    # A user's job with an id the demo uses, in both the --db and the PERSCHED_DB database.
    before = {url: _job_row(url, "report") for url in (seeded, other)}
    demo_tmp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    demo_tmp.mkdir()
    cwd.mkdir()
    proc = persched("--db", seeded, "demo", env={"PERSCHED_DB": other, "TMPDIR": str(demo_tmp)}, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    # The demo's flaky job logs its (expected) failures; the demo itself talks on stdout.
    assert "greet" in proc.stdout
    assert "persched: error" not in proc.stderr
    assert {url: _job_row(url, "report") for url in (seeded, other)} == before
    assert sql(seeded, "SELECT count(*) FROM persched_jobs WHERE job_id = 'greet'") == [(0,)]
    # It says where its own database is, and that database has the demo's history.
    demo_db = next(demo_tmp.glob("persched-demo-*/demo.db"))
    assert str(demo_db) in proc.stdout
    assert "is not touched" in proc.stdout
    assert sql(f"sqlite:///{demo_db}", "SELECT count(*) FROM persched_runs WHERE job_id = 'greet'")[0][0] > 0
    assert list(cwd.iterdir()) == []  # nor the default database


def test_demo_without_a_database_named_indents_tracebacks_under_their_line(tmp_path: Path) -> None:
    proc = persched("demo", env={"TMPDIR": str(tmp_path)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" in proc.stdout  # the flaky job's deliberate failure
    # The layout: step lines start with their number; everything else is indented or a header.
    for line in proc.stdout.splitlines():
        assert not line or line[0].isspace() or re.match(r"(\d\. |persched demo |\(|The demo )", line), line
    assert not (tmp_path / "persched.db").exists()  # nor the default database


# -- pipes -----------------------------------------------------------------------------


def test_output_cut_short_by_a_closed_pipe_ends_quietly(seeded: str) -> None:
    # Far more output than a pipe buffer (64 KiB), so the CLI is still writing when
    # the reader goes away: the write fails with EPIPE every time, not half the time.
    sql(
        seeded,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)"
        " INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, finished_at, outcome,"
        " instance_id, overran, run_now)"
        " SELECT 'report', 1, '2027-01-15 08:00:00', '2027-01-15 08:00:00', '2027-01-15 08:00:01', 'ok',"
        " 'host:1:abc', 0, 1 FROM n",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "persched", "--db", seeded, "runs", "--limit", "3000"],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("RUN")
    proc.stdout.close()  # as `head -1` does
    _, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    assert stderr == ""
    assert proc.returncode == 141  # 128 + SIGPIPE, as `cat` or `yes` end


# -- tables for people -----------------------------------------------------------------


@pytest.mark.parametrize("argv", [["jobs"], ["runs"], ["show", "invoices-sync"]])
def test_tables_fit_the_width_in_columns(seeded: str, argv: list[str]) -> None:
    full = persched("--db", seeded, *argv)
    assert full.returncode == 0, full.stderr
    assert max(map(len, full.stdout.splitlines())) > 80  # not a terminal: never cut
    fitted = persched("--db", seeded, *argv, env={"COLUMNS": "80"})
    assert fitted.returncode == 0, fitted.stderr
    lines = fitted.stdout.splitlines()
    assert max(map(len, lines)) <= 80, fitted.stdout
    # Headers are whole words (no OUTC/OME), and the ids are never cut.
    header = next(line for line in lines if line.startswith(("ID ", "RUN ")))
    assert all(word in FULL_HEADERS for word in re.split(r"\s{2,}", header.strip())), header
    assert "invoices-sync" in fitted.stdout
    wide = persched("--db", seeded, *argv, "--wide", env={"COLUMNS": "80"})
    assert wide.stdout.splitlines()[0] == full.stdout.splitlines()[0]


FULL_HEADERS = {
    *("ID", "TARGET", "SCHEDULE", "NEXT RUN (UTC)", "WHEN", "STATE", "LAST", "RUNS", "ERRORS"),
    *("RUN", "JOB", "GEN", "SCHEDULED FOR (UTC)", "STARTED (UTC)", "DURATION", "OUTCOME", "INSTANCE", "ERROR"),
}


def _run_in_pty(argv: list[str], columns: int) -> str:
    """Run the CLI with stdout on a real terminal of `columns` columns; return what it printed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "persched", *argv],
        cwd=REPO,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        ready, _, _ = select.select([leader], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            proc.kill()
            raise AssertionError("the CLI did not finish writing to the terminal")
        try:
            chunk = os.read(leader, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_at_a_terminal_tables_fit_its_width(seeded: str) -> None:
    for argv in (["jobs"], ["runs"]):
        out = _run_in_pty(["--db", seeded, *argv], 80)
        assert out.strip(), argv
        assert max(map(len, out.splitlines())) <= 80, out


def test_a_one_shot_schedule_fits_a_terminal_whole(sqlite_url: str) -> None:
    # Cut to the width like any other, "once at 2026-01-15T08:00:00Z" read "once at 2026-1…";
    # in a column too narrow for it, it is said in the 14 characters the column may be cut to.
    now = datetime.now(timezone.utc)
    soon, far = (now + timedelta(hours=1)).replace(microsecond=0), (now + timedelta(days=400)).replace(microsecond=0)
    with JobScheduler(sqlite_url) as sched:  # not started: the rows alone, on the real clock
        sched.schedule("invoices-sync", cli_jobs.fail_always, 60.0, args=("upstream refused",))
        sched.schedule("launch-of-spring-campaign", cli_jobs.noop, run_at=soon)
        sched.schedule("anniversary", cli_jobs.noop, run_at=far)
    out = _run_in_pty(["--db", sqlite_url, "jobs"], 80)
    assert max(map(len, out.splitlines())) <= 80, out
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert f" at {soon:%m-%d %H:%M} " in rows["launch-of-spring-campaign"], out  # within half a year
    assert f" at {far:%Y-%m-%d} " in rows["anniversary"], out  # further ahead: the date, no time
    assert "once" not in out
    # In full (--wide, a pipe, --json) the schedule is the exact instant, as before.
    exact = f"once at {soon:%Y-%m-%dT%H:%M:%S}Z"
    assert exact in persched("--db", sqlite_url, "jobs", "--wide", env={"COLUMNS": "80"}).stdout
    assert exact in persched("--db", sqlite_url, "jobs").stdout
    listed = json.loads(persched("--db", sqlite_url, "jobs", "--json", env={"COLUMNS": "80"}).stdout)
    assert {job["job_id"]: job["schedule"] for job in listed}["launch-of-spring-campaign"] == exact


LONG_IDS: Final = (
    "nightly-invoice-reconcile-eu",  # 28 characters: the header alone was 81 wide
    "launch-of-the-spring-campaign-2027-in-every-region",
    "x" * 79,  # as wide as a line of its own can be
)


@pytest.fixture
def long_ids(make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str) -> str:
    """Long ids with every kind of schedule (interval, cron in a zone, one-shot, paused), runs, two namespaces."""
    sched = make_scheduler(start=True, workers=2)
    sched.schedule(LONG_IDS[0], cli_jobs.fail_always, 86_400.0, args=("upstream refused: 503",), start_in=0)
    sched.schedule(LONG_IDS[1], cli_jobs.noop, run_at=datetime.now(timezone.utc) + timedelta(days=3))
    sched.schedule(LONG_IDS[2], cli_jobs.noop, cron="0 3 * * *", timezone="America/Argentina/Buenos_Aires")
    sched.schedule("report", cli_jobs.noop, 300.0, start_in=0)
    wait_until(lambda: len(finished_runs(sched, LONG_IDS[0])) == 1, message="the failing run")
    wait_until(lambda: len(finished_runs(sched, "report")) == 1, message="report run")
    sched.pause("report")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    other = JobScheduler(sqlite_url, namespace="billing-and-invoicing-eu-west")  # not started: the row alone
    try:
        other.schedule("billing-and-invoicing-eu-west.nightly-invoice-reconcile", cli_jobs.noop, cron="@daily")
    finally:
        other.shutdown()
    return sqlite_url


LONG_ID_TABLES: Final = (
    ["jobs"],
    ["jobs", "--all-namespaces"],
    ["runs"],
    ["runs", "--all-namespaces"],
    ["show", LONG_IDS[0]],
    ["show", "report"],
)


@pytest.mark.parametrize("argv", LONG_ID_TABLES, ids=" ".join)
def test_tables_with_long_ids_fit_80_columns_at_a_terminal_and_in_a_pipe(long_ids: str, argv: list[str]) -> None:
    """Every table fits; a job id too long for its column is on a line of its own, whole."""
    piped = persched("--db", long_ids, *argv, env={"COLUMNS": "80"})
    assert piped.returncode == 0, piped.stderr
    for out in (piped.stdout, _run_in_pty(["--db", long_ids, *argv], 80)):
        assert max(map(len, out.splitlines())) <= 80, out
        shown = (*LONG_IDS, "report") if argv[0] == "jobs" else (LONG_IDS[0], "report") if argv[0] == "runs" else ()
        for job_id in shown:
            assert job_id in out.split(), out  # whole, copyable
        if argv[0] != "show":
            header = out.splitlines()[0]
            assert all(word in FULL_HEADERS | {"NAMESPACE"} for word in re.split(r"\s{2,}", header.strip())), header


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_show_says_that_the_lease_of_a_dead_process_expired(tmp_path: Path) -> None:
    db, marker, log = tmp_path / "jobs.db", tmp_path / "started", tmp_path / "later-runs.log"
    with (tmp_path / "child.out").open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.support.sigkill_child", str(db), str(marker), str(log)],
            cwd=REPO,
            env=cli_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_started(child, marker.exists, "the child's run started", (tmp_path / "child.out").read_text)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(TIMEOUT)
    url = f"sqlite:///{db}"
    (lease,) = sql(url, "SELECT lease_until FROM persched_jobs WHERE job_id = 'victim'")[0]
    wait_until(
        lambda: datetime.now(timezone.utc) > datetime.fromisoformat(lease).replace(tzinfo=timezone.utc),
        message="the dead child's lease (1 s) expired",
    )
    proc = persched("--db", url, "show", "victim", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    state = proc.stdout.split("\nstate", 1)[1].split("\ngeneration", 1)[0]
    words = " ".join(state.split())
    assert words.startswith("running on "), proc.stdout
    assert "lease expired " in words
    assert " ago (" in words
    assert "records the run as lost" in words
    assert "lease until" not in words
    assert max(map(len, proc.stdout.splitlines())) <= 80, proc.stdout  # wrapped under itself


def test_durations_and_plurals(seeded: str) -> None:
    run_id = sql(seeded, "SELECT max(run_id) FROM persched_runs WHERE job_id = 'report'")[0][0]
    sql(
        seeded,
        "UPDATE persched_runs SET started_at = '2027-01-15 08:00:00.000000',"
        " finished_at = '2027-01-15 08:00:01.234567' WHERE run_id = ?",
        (run_id,),
    )
    show = persched("--db", seeded, "show", "report")
    assert show.returncode == 0, show.stderr
    assert "latest run:" in show.stdout  # not "latest 1 runs"
    assert "1 (0 errors)" in show.stdout
    assert " 1.2s " in show.stdout  # not "1s"
    assert "1 (1 error) of generation 1" in persched("--db", seeded, "show", "invoices-sync").stdout


def test_jobs_shows_a_run_now_run_in_flight(make_scheduler: SchedulerFactory, sqlite_url: str) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("slow", jobs.block, 3600.0, args=("slow",))
    assert sched.run_now("slow")
    gate = jobs.gate("slow")
    assert gate.started.wait(TIMEOUT)
    try:
        proc = persched("--db", sqlite_url, "jobs")
    finally:
        gate.release.set()
    assert proc.returncode == 0, proc.stderr
    row = proc.stdout.splitlines()[1]
    assert "running, run-now" in row
    assert "started " in row  # WHEN says when the run in progress started
    slot = sched.runs("slow")[0].scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert slot in row  # NEXT RUN is the slot being run (docs/operations.md)


# -- exit codes: one rule for every verb -------------------------------------------------


def test_every_verb_exits_0_when_the_job_already_is_as_asked(seeded: str) -> None:
    steps = [
        (["pause", "report"], 0, "paused 'report'"),
        (["pause", "report"], 0, "already paused; nothing changed"),
        (["run-now", "report"], 1, "is paused"),  # cannot be done: an error
        (["resume", "report"], 0, "resumed 'report'"),
        (["resume", "report"], 0, "is not paused"),
        (["run-now", "report"], 0, "run-now requested"),
        (["run-now", "report"], 0, "already pending; nothing added"),
        (["deschedule", "report"], 0, "descheduled 'report'"),
        (["deschedule", "report"], 0, "already descheduled; nothing changed"),
        (["pause", "report"], 1, "descheduled"),
        (["resume", "report"], 1, "descheduled"),
        (["run-now", "report"], 1, "descheduled"),
    ]
    for argv, code, needle in steps:
        proc = persched("--db", seeded, *argv)
        assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
        assert needle in (proc.stdout if code == 0 else proc.stderr), (argv, proc.stdout, proc.stderr)
    for verb in ("pause", "resume", "run-now", "deschedule", "show", "runs"):
        proc = persched("--db", seeded, verb, "nope")
        assert proc.returncode == 1, verb
        assert "no job 'nope'" in proc.stderr


def test_deschedule_says_an_application_declares_it_again(seeded: str) -> None:
    proc = persched("--db", seeded, "deschedule", "report")
    assert proc.returncode == 0, proc.stderr
    assert "persched_setup" in proc.stdout
    assert "schedules it again when it next starts" in proc.stdout


def test_deschedule_exits_1_for_an_unknown_job_where_the_api_returns_false(seeded: str) -> None:
    """Both kept on purpose: a shell script needs the exit code, code gets a bool; the help says so."""
    unstarted = JobScheduler(seeded)  # runs nothing: the row alone
    try:
        proc = persched("--db", seeded, "deschedule", "nope")
        assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
        assert unstarted.deschedule("nope") is False
        assert unstarted.deschedule("report") is True
        assert persched("--db", seeded, "deschedule", "report").returncode == 0  # already as asked
        assert unstarted.deschedule("report") is False
    finally:
        unstarted.shutdown()
    help_text = " ".join(persched("deschedule", "--help").stdout.split())
    assert "an unknown job exits 1" in help_text
    assert "JobScheduler.deschedule() returns False for both" in help_text


def test_show_says_the_counts_are_of_the_current_definition(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str
) -> None:
    """After a replacement a job with two ok runs counts 0: `show` says whose runs it counts."""
    sched = make_scheduler(start=True)
    sched.schedule("report", cli_jobs.noop, 60.0, start_in=0)
    wait_until(lambda: len(finished_runs(sched, "report")) == 1, message="the first run")
    fake_clock.advance(60.0)
    wait_until(lambda: len(finished_runs(sched, "report")) == 2, message="the second run")
    assert sched.schedule("report", cli_jobs.noop, 120.0).run_count == 0  # replaced: generation 2
    sched.shutdown(wait=True, timeout=TIMEOUT)
    shown = " ".join(persched("--db", sqlite_url, "show", "report").stdout.split())
    assert "runs 0 (0 errors) of generation 2, the current definition; last outcome -" in shown
    assert "latest 2 runs" in shown  # the older generation's runs are still listed


# -- messages ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["jobs"], ["migrate"], ["runs"]])
def test_a_directory_as_the_database_is_named_as_one(tmp_path: Path, command: list[str]) -> None:
    proc = persched(*command, env={"PERSCHED_DB": str(tmp_path)})
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "is a directory" in proc.stderr
    assert "unable to open database file" not in proc.stderr


# -- docs ------------------------------------------------------------------------------------


def _doc_samples(name: str) -> list[list[str]]:
    """The fenced blocks of docs/operations.md whose first line is a `persched jobs`/`runs` header."""
    text = (REPO / "docs" / "operations.md").read_text()
    blocks = [block.splitlines() for block in re.findall(r"```\n(.*?)```", text, re.DOTALL)]
    return [block for block in blocks if block and block[0].startswith(name)]


def test_the_docs_samples_match_real_output(seeded: str) -> None:
    jobs_samples = _doc_samples("ID  ")
    runs_samples = _doc_samples("RUN  ")
    assert jobs_samples
    assert runs_samples
    real = {
        "ID": columns(persched("--db", seeded, "jobs").stdout.splitlines()[0]),
        "RUN": columns(persched("--db", seeded, "runs").stdout.splitlines()[0]),
    }
    for sample in jobs_samples + runs_samples:
        header = columns(sample[0])
        full = real[header[0]]
        if max(map(len, sample)) > 80:
            assert header == full, sample[0]  # a full-width sample: exactly the real header
        else:
            # A sample at 80 columns: the real columns, some left out, in their order.
            assert header == [name for name in full if name in header], sample[0]
            assert set(header) <= set(full), sample[0]
        # Aligned like the real table: each column starts at the same offset in every row.
        starts = [sample[0].index(name) for name in header]
        for row, below in zip(sample[1:], [*sample[2:], ""], strict=True):
            if " " not in row and below.startswith(" "):
                continue  # a job id too long for its column, on a line of its own; its row is below
            assert all(start == 0 or row[start - 1 : start] in ("", " ") for start in starts), row


def columns(line: str) -> list[str]:
    """The cells of a table line (separated by two spaces or more)."""
    return re.split(r"\s{2,}", line.strip())


def test_json_output_is_never_cut(seeded: str) -> None:
    proc = persched("--db", seeded, "runs", "--json", env={"COLUMNS": "40"})
    runs = json.loads(proc.stdout)
    assert any(len(run["error"] or "") > 40 for run in runs)
