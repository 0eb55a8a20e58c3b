"""Bad input at the edges: a one-line `InvalidJobError` naming the argument, nothing written.

Instants far in the past and namespaces that no database can store (the
metrics' options: tests/metrics/test_metrics_inputs.py). Wherever a database
is touched the test runs on every engine (SQLite, PostgreSQL, MariaDB), with
a FakeClock at an odd instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import AsyncJobScheduler, JobScheduler, cli
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, db_sql

if TYPE_CHECKING:
    from collections.abc import Iterator

START: Final = 1_700_000_000.123457
RECORD: Final = "tests.support.jobs:record"
PLUS_14: Final = timezone(timedelta(hours=14))

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def sched(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """An unstarted scheduler on the test's database holding one job, "keep"."""
    made = JobScheduler(db_url, clock=clock)
    made.schedule("keep", RECORD, 10.0, args=("keep",))
    yield made
    made.shutdown(wait=True, timeout=TIMEOUT)


def job_ids(url: str) -> list[str]:
    """Every job id in the database (any namespace, any state), read with plain SQL."""
    return [row[0] for row in db_sql(url, "SELECT job_id FROM persched_jobs ORDER BY job_id")]


# --- instants before the first one a datetime can hold in UTC -------------------------------------


@pytest.mark.parametrize(
    ("argument", "options"),
    [
        ("run_at", {"run_at": datetime(1, 1, 1, 12, tzinfo=PLUS_14)}),  # 0000-12-31T22:00Z: before datetime.min
        ("run_at", {"run_at": datetime(1, 1, 1, tzinfo=timezone.utc)}),  # no room for a local time west of UTC
        ("start_at", {"interval_seconds": 10.0, "start_at": datetime(1, 1, 1, 12, tzinfo=PLUS_14)}),
        ("end_at", {"interval_seconds": 10.0, "end_at": datetime(1, 1, 1, 23, tzinfo=PLUS_14)}),
    ],
    ids=["run_at+14", "run_at-utc", "start_at", "end_at"],
)
def test_an_instant_before_the_earliest_is_refused(
    db_url: str, sched: JobScheduler, argument: str, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidJobError) as raised:
        sched.schedule("far-past", RECORD, **options)
    assert raised.value.argument == argument
    assert "0001-01-02" in str(raised.value)  # the bound, so the caller knows what is accepted
    assert job_ids(db_url) == ["keep"]


def test_the_earliest_instant_is_accepted_and_read_back_exactly(db_url: str, sched: JobScheduler) -> None:
    earliest = datetime(1, 1, 2, tzinfo=timezone.utc)
    job = sched.schedule("earliest", RECORD, run_at=datetime(1, 1, 2, 14, tzinfo=PLUS_14))  # the same instant
    assert job.run_at == earliest
    stored = sched.get_job("earliest")
    assert stored is not None
    assert stored.run_at == earliest


# --- namespaces no database can store ---------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["a\udc80", "\ud800", "ok-\udfff-not"])
def test_a_namespace_with_a_lone_surrogate_is_refused_by_the_constructor(empty_db_url: str, namespace: str) -> None:
    # A database nobody opened yet: for SQLite, the test sees that no file was made.
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(empty_db_url, namespace=namespace)
    assert raised.value.argument == "namespace"
    assert "surrogate" in str(raised.value)
    with pytest.raises(InvalidJobError) as front:
        AsyncJobScheduler(empty_db_url, namespace=namespace)
    assert front.value.argument == "namespace"
    # Nothing was opened or written: a valid scheduler on the same database starts empty and works.
    if empty_db_url.startswith("sqlite:///"):
        assert not Path(empty_db_url.removeprefix("sqlite:///")).exists()
    good = JobScheduler(empty_db_url, namespace="a")
    try:
        good.schedule("x", RECORD, 10.0)
        assert [j.job_id for j in good.jobs()] == ["x"]
    finally:
        good.shutdown()


def test_the_cli_refuses_a_namespace_with_a_lone_surrogate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A byte that is not UTF-8 on the command line arrives as a lone surrogate (surrogateescape).
    assert cli.main(["--db", str(tmp_path / "cli.db"), "--namespace", "a\udc80", "jobs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("persched: error: bad --namespace: namespace: ")
    assert err.count("\n") == 1
    assert not (tmp_path / "cli.db").exists()
