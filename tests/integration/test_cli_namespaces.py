"""Namespaces seen from the command line, and job ids that are not there, through real ``python -m persched``.

A database holds jobs of "billing" and "web" and none of "default". A listing
of a namespace without jobs names the namespaces that have some (and the
near miss of a misspelled ``--namespace``); ``show`` and the verbs name the
namespace that owns an id, or offer the near miss of a mistyped id;
``--all-namespaces`` lists every namespace's jobs and runs with a NAMESPACE
column, and its ``--json`` objects carry their namespace. Errors are one line
on stderr, exit 1, and write nothing. On every engine (the listings are SQL),
but for the verb-by-verb error messages.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler, Run
from persched._interfaces.existing import open_existing
from persched.cli import lookup
from tests.support.cli_run import persched
from tests.support.helpers import TIMEOUT, db_sql

if TYPE_CHECKING:
    import subprocess

    from persched.testing import FakeClock

pytestmark = [pytest.mark.slow, pytest.mark.every_engine]

NOOP: Final = "tests.support.cli_jobs:noop"
JOBS: Final = {"billing": ("invoices", "dunning", "ledger-export"), "web": ("sitemap",)}


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The process failed with `code`, printing exactly one line and no traceback on stderr; that line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    return lines[0]


def rows(url: str) -> list[tuple[object, ...]]:
    return sorted(db_sql(url, "SELECT job_id, namespace, state, paused, run_now_at, updated_at FROM persched_jobs"))


@pytest.fixture
def shared(db_url: str, fake_clock: FakeClock) -> str:
    """Jobs of "billing" (3) and "web" (1), each run once, and none of "default"."""
    for namespace, ids in JOBS.items():
        with JobScheduler(db_url, clock=fake_clock, namespace=namespace, instance_id=f"{namespace}-1") as sched:
            for i, job_id in enumerate(ids):
                sched.schedule(job_id, NOOP, 60.0 * (i + 1), start_in=0)
            fake_clock.advance(0)
            assert sched.wait_idle(TIMEOUT)
    return db_url


def test_an_empty_namespace_names_the_namespaces_that_have_jobs(shared: str) -> None:
    proc = persched("--db", shared, "jobs")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("no active jobs in namespace 'default' of ")
    assert lines[1:] == [
        "namespaces with jobs: billing (3 jobs), web (1 job)",
        "choose one with --namespace NAME, or all of them with --all-namespaces",
    ]
    assert all(len(line) <= 80 for line in lines[1:])
    # The same for runs, and --json stays a bare array (the namespaces in a note on stderr).
    runs = persched("--db", shared, "runs")
    assert runs.stdout.splitlines()[1:] == lines[1:]
    listed = persched("--db", shared, "--json", "jobs")
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])
    assert listed.stderr == (
        "persched: note: namespace 'default' has no jobs; namespaces with jobs: billing (3 jobs), web (1 job)\n"
    )


def test_a_misspelled_namespace_gets_the_near_miss(shared: str) -> None:
    proc = persched("--db", shared, "--namespace", "biling", "jobs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == [
        "namespaces with jobs: billing (3 jobs), web (1 job)",
        "did you mean --namespace billing? (or --all-namespaces for all of them)",
    ]


def test_a_namespace_with_jobs_and_no_runs_says_only_that(shared: str, fake_clock: FakeClock) -> None:
    with JobScheduler(shared, clock=fake_clock) as sched:
        sched.schedule("fresh", NOOP, 3600.0)
    proc = persched("--db", shared, "runs")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert proc.stdout.startswith("no runs recorded in namespace 'default' of ")


@pytest.mark.sqlite_only("the same two reads for every verb: one engine keeps it fast; the listings run on all")
@pytest.mark.parametrize("command", ["show", "runs", "pause", "resume", "run-now", "deschedule"])
def test_a_job_of_another_namespace_is_named_with_its_namespace(shared: str, command: str) -> None:
    before = rows(shared)
    line = one_line_error(persched("--db", shared, command, "invoices"))
    assert line == (
        "persched: error: no job 'invoices' in namespace 'default': it is a job of namespace 'billing';"
        " add --namespace billing"
    )
    assert rows(shared) == before


@pytest.mark.sqlite_only("the same two reads for every verb: one engine keeps it fast; the listings run on all")
@pytest.mark.parametrize("command", ["show", "runs", "pause", "resume", "run-now", "deschedule"])
def test_a_near_miss_job_id_gets_did_you_mean(shared: str, command: str) -> None:
    before = rows(shared)
    line = one_line_error(persched("--db", shared, "--namespace", "billing", command, "invocies"))
    assert line == "persched: error: no job 'invocies' in namespace 'billing'; did you mean 'invoices'?"
    far = one_line_error(persched("--db", shared, "--namespace", "billing", command, "zzz"))
    assert far == "persched: error: no job 'zzz' in namespace 'billing'; `persched jobs` lists its jobs"
    assert rows(shared) == before


def test_a_descheduled_job_is_reported_as_descheduled(shared: str) -> None:
    assert persched("--db", shared, "--namespace", "web", "deschedule", "sitemap").returncode == 0
    line = one_line_error(persched("--db", shared, "--namespace", "web", "pause", "sitemap"))
    assert line == (
        "persched: error: no job 'sitemap' in namespace 'web': it was descheduled;"
        " `persched runs sitemap` shows its history"
    )
    again = persched("--db", shared, "--namespace", "web", "deschedule", "sitemap")
    assert again.returncode == 0  # unchanged: already as asked
    assert "already descheduled" in again.stdout


def test_show_names_the_jobs_namespace(shared: str) -> None:
    proc = persched("--db", shared, "--namespace", "billing", "show", "dunning")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["job         dunning", "namespace   billing"]


def test_all_namespaces_lists_every_jobs_with_a_namespace_column(shared: str) -> None:
    proc = persched("--db", shared, "jobs", "--all-namespaces")
    assert proc.returncode == 0, proc.stderr
    header, *lines = proc.stdout.splitlines()
    assert header.split()[:2] == ["NAMESPACE", "ID"]
    assert [line.split()[:2] for line in lines] == [
        ["billing", "invoices"],
        ["billing", "dunning"],
        ["billing", "ledger-export"],
        ["web", "sitemap"],
    ]
    fitted = persched("--db", shared, "jobs", "--all-namespaces", env={"COLUMNS": "80"})
    assert all(len(line) <= 80 for line in fitted.stdout.splitlines()), fitted.stdout
    assert fitted.stdout.splitlines()[0].startswith("NAMESPACE  ID")
    listed = json.loads(persched("--db", shared, "--json", "jobs", "--all-namespaces").stdout)
    assert sorted((job["namespace"], job["job_id"]) for job in listed) == sorted(
        (namespace, job_id) for namespace, ids in JOBS.items() for job_id in ids
    )


def test_all_namespaces_lists_every_runs_with_its_namespace(shared: str) -> None:
    proc = persched("--db", shared, "runs", "--all-namespaces", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    header, *lines = proc.stdout.splitlines()
    assert header.split()[:3] == ["NAMESPACE", "RUN", "JOB"]
    assert all(len(line) <= 80 for line in [header, *lines])
    assert sorted(line.split()[0] for line in lines) == ["billing", "billing", "billing", "web"]
    listed = json.loads(persched("--db", shared, "runs", "--all-namespaces", "--json").stdout)
    assert sorted((run["namespace"], run["job_id"]) for run in listed) == sorted(
        (namespace, job_id) for namespace, ids in JOBS.items() for job_id in ids
    )
    for run in listed:
        Run.model_validate({k: v for k, v in run.items() if k != "namespace"})
    one = json.loads(persched("--db", shared, "runs", "sitemap", "--all-namespaces", "--json").stdout)
    assert [(run["namespace"], run["job_id"]) for run in one] == [("web", "sitemap")]
    line = one_line_error(persched("--db", shared, "runs", "nowhere", "--all-namespaces"))
    assert line.startswith("persched: error: no job 'nowhere' in any namespace of ")


@pytest.mark.sqlite_only("a bound on Python's side: one engine is enough")
def test_no_near_miss_is_looked_for_among_too_many_ids(shared: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_existing(shared, "billing", read_only=True)
    try:
        monkeypatch.setattr(lookup, "MAX_SUGGESTION_IDS", 2)  # billing has 3
        assert str(lookup.missing_job(store, "invocies")).endswith("; `persched jobs` lists its jobs")
        monkeypatch.setattr(lookup, "MAX_SUGGESTION_IDS", 3)
        assert str(lookup.missing_job(store, "invocies")).endswith("; did you mean 'invoices'?")
    finally:
        store.engine.dispose()
