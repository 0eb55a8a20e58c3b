"""``persched instances`` and ``persched check`` through real ``python -m persched``, on every engine.

A scheduler on the real clock keeps its instance row alive: ``check`` exits 0
and ``instances`` lists it. Once it is gone, ``check`` exits 1 with one line
per problem (``--json``: the same problems as a list), and ``persched jobs``
says in its last line that nothing runs the jobs. Neither command writes.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Final

import pytest

from persched import JobScheduler
from tests.support.cli_run import persched
from tests.support.helpers import db_sql

pytestmark = [pytest.mark.slow, pytest.mark.every_engine]

NOOP: Final = "tests.support.cli_jobs:noop"
NO_SCHEDULER: Final = "namespace 'default': no live scheduler, and 1 job waits to run"


def snapshot(url: str) -> list[list[tuple[object, ...]]]:
    return [
        sorted(db_sql(url, f"SELECT * FROM {table}"), key=repr)  # noqa: S608 - our own table names
        for table in ("persched_jobs", "persched_runs", "persched_changes", "persched_instances")
    ]


def test_check_passes_while_a_scheduler_lives_and_fails_once_none_does(db_url: str) -> None:
    with JobScheduler(db_url, instance_id="worker-1") as sched:
        sched.schedule("hourly", NOOP, 3600.0)
        healthy = persched("--db", db_url, "check")
        assert (healthy.returncode, healthy.stderr) == (0, ""), healthy
        assert healthy.stdout.startswith("ok: namespace 'default' of ")
        listed = persched("--db", db_url, "instances")
        assert listed.returncode == 0, listed
        assert listed.stdout.splitlines()[0].split() == ["INSTANCE", "HOST", "PID", "STARTED", "RENEWED"]
        assert listed.stdout.splitlines()[1].split()[:3] == ["worker-1", "-", "-"]  # a custom id: no host, no pid
        (row,) = json.loads(persched("--db", db_url, "instances", "--json").stdout)
        assert (row["instance_id"], row["shares_work"]) == ("worker-1", True)
        jobs = persched("--db", db_url, "jobs").stdout.splitlines()
        assert "no scheduler is alive" not in jobs[-1]
    before = snapshot(db_url)
    failing = persched("--db", db_url, "check")
    assert (failing.returncode, failing.stdout.splitlines(), failing.stderr) == (1, [NO_SCHEDULER], "")
    as_json = persched("--db", db_url, "check", "--json")
    assert as_json.returncode == 1
    assert [(p["problem"], p["namespace"], p["message"]) for p in json.loads(as_json.stdout)] == [
        ("no_scheduler", "default", NO_SCHEDULER)
    ]
    assert persched("--db", db_url, "instances").stdout.startswith("no live scheduler in namespace 'default'")
    last = persched("--db", db_url, "jobs").stdout.splitlines()[-1]
    assert last.startswith("no scheduler is alive for namespace 'default': these jobs do not run")
    assert snapshot(db_url) == before  # nothing written


def test_check_of_other_namespaces(db_url: str) -> None:
    with JobScheduler(db_url, namespace="billing") as sched:
        sched.schedule("invoices", NOOP, 3600.0)
    assert persched("--db", db_url, "check").returncode == 0  # "default" has no jobs: nothing waits
    every = persched("--db", db_url, "check", "--all-namespaces")
    assert every.returncode == 1
    assert every.stdout.splitlines() == ["namespace 'billing': no live scheduler, and 1 job waits to run"]
    assert persched("--db", db_url, "check", "--failures", "0").returncode == 2  # a usage error


def test_pause_all_until_with_a_note_then_resume_all(db_url: str) -> None:
    with JobScheduler(db_url) as sched:
        sched.schedule("invoices", NOOP, 3600.0)
        sched.schedule("report", NOOP, 86400.0)
    paused = persched("--db", db_url, "pause", "--all", "--until", "2h", "--note", "database upgrade")
    assert paused.returncode == 0, paused
    assert paused.stdout.startswith("paused 2 jobs of namespace 'default' until ")
    listed = json.loads(persched("--db", db_url, "jobs", "--json").stdout)
    assert {(j["job_id"], j["paused"], j["pause_note"]) for j in listed} == {
        ("invoices", True, "database upgrade"),
        ("report", True, "database upgrade"),
    }
    assert all(j["paused_until"] is not None for j in listed)
    shown = persched("--db", db_url, "show", "report").stdout
    assert "pause note    database upgrade" in shown
    assert persched("--db", db_url, "pause", "--all").stdout.startswith("paused 0 jobs")
    resumed = persched("--db", db_url, "resume", "--all")
    assert resumed.stdout.startswith("resumed 2 jobs of namespace 'default'")
    assert all(
        not j["paused"] and j["pause_note"] is None
        for j in json.loads(persched("--db", db_url, "jobs", "--json").stdout)
    )


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--until", "2026-12-28T06:00"], "persched: error: bad --until '2026-12-28T06:00': say its UTC offset"),
        (["--until", "monday"], "persched: error: bad --until 'monday': give a span (90m, 2h, 1d, 45s)"),
        (["--until", "2001-01-01T00:00Z"], "persched: error: until: must lie ahead: 2001-01-01T00:00:00+00:00"),
        (["--note", "x" * 501], "persched: error: note: must be at most 500 characters, got 501"),
    ],
)
def test_bad_pause_input_is_one_line_and_writes_nothing(db_url: str, arguments: list[str], error: str) -> None:
    with JobScheduler(db_url) as sched:
        sched.schedule("report", NOOP, 86400.0)
    before = snapshot(db_url)
    for target in (["report"], ["--all"]):
        failed = persched("--db", db_url, "pause", *target, *arguments)
        assert (failed.returncode, failed.stdout) == (1, ""), failed
        assert failed.stderr.startswith(error), failed.stderr
        assert len(failed.stderr.splitlines()) == 1
    assert snapshot(db_url) == before


def test_next_lists_the_slots_in_utc_and_in_the_zone_with_the_change_marked(db_url: str) -> None:
    start = datetime(2030, 3, 29, tzinfo=timezone.utc)  # Paris springs forward on 2030-03-31
    with JobScheduler(db_url) as sched:
        sched.schedule("nightly", NOOP, cron="30 2 * * *", timezone="Europe/Paris", start_at=start)
    shown = persched("--db", db_url, "next", "nightly", "--count", "3")
    assert shown.returncode == 0, shown
    assert shown.stdout.splitlines() == [
        "next 3 slots of 'nightly' (cron 30 2 * * * Europe/Paris):",
        "UTC                   Europe/Paris",
        "2030-03-29T01:30:00Z  2030-03-29 02:30:00 CET (+01:00)",
        "2030-03-30T01:30:00Z  2030-03-30 02:30:00 CET (+01:00)",
        "2030-03-31T01:00:00Z  2030-03-31 03:00:00 CEST (+02:00)  daylight saving: +01:00 -> +02:00",
    ]
    as_json = json.loads(persched("--db", db_url, "next", "nightly", "--count", "1", "--json").stdout)
    assert as_json == ["2030-03-29T01:30:00Z"]
    missing = persched("--db", db_url, "next", "nightly-typo")
    assert missing.returncode == 1
    assert missing.stderr.startswith("persched: error: no job 'nightly-typo'")
