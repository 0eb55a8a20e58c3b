"""Change pick-up across processes: a change made by another process is picked up at
the next signal, not the poll; on PostgreSQL the listening connection survives being killed
(``pg_terminate_backend``), the poll covers while it cannot reconnect, and shutdown closes it.

The running scheduler is on a FakeClock whose poll (`pickup_seconds`) is far away; the other
process writes on a FakeClock at the same instant, so that its job is due at once for both.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, Final

import psycopg
import pytest
from sqlalchemy.engine import make_url

from persched import JobScheduler
from persched._store.dialects.postgresql import PostgreSQLDialect
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.engines import engine_params
from tests.support.helpers import TIMEOUT, db_sql, heartbeat_settled, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

POLL: Final = 600.0  # fake seconds: the counter's poll never comes unless a test advances this far
CHECK: Final = 0.25  # fake seconds: pickup_check_seconds
ODD_INSTANT: Final = 1_700_000_123.4567
ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SCHEDULE_ONE: Final = f"""
import sys
from persched import JobScheduler
from persched.testing import FakeClock
writer = JobScheduler(sys.argv[1], clock=FakeClock(start={ODD_INSTANT!r}))
writer.schedule("x", "tests.support.jobs:block", 3600.0, args=("x",), start_in=0)
writer.shutdown()
"""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=ODD_INSTANT)


@pytest.fixture
def made() -> Iterator[list[JobScheduler]]:
    schedulers: list[JobScheduler] = []
    yield schedulers
    jobs.release_all()
    for sched in schedulers:
        sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def pg_named_url(pg_only_url: str) -> str:
    """A fresh PostgreSQL schema, its sessions named so that this test finds its own listener."""
    name = f"persched-pickup-{uuid.uuid4().hex[:8]}"
    return make_url(pg_only_url).update_query_dict({"application_name": name}).render_as_string(hide_password=False)


def _running(made: list[JobScheduler], url: str, clock: FakeClock) -> JobScheduler:
    sched = JobScheduler(url, clock=clock, pickup_seconds=POLL, pickup_check_seconds=CHECK)
    made.append(sched)
    sched.start()
    heartbeat_settled(sched, clock)  # or its first round, not a signal, may find the other's change
    return sched


def _ran(key: str) -> bool:
    started = jobs.gate(key).started.wait(TIMEOUT)
    jobs.gate(key).release.set()
    return started


def _listeners(url: str) -> list[int]:
    """The backends of `url`'s application name that LISTEN (their last statement)."""
    name = make_url(url).query["application_name"]
    return [
        int(pid)
        for (pid,) in db_sql(
            url,
            "SELECT pid FROM pg_stat_activity WHERE application_name = :name AND query LIKE 'LISTEN %'",
            name=name,
        )
    ]


def _sessions(url: str) -> int:
    name = make_url(url).query["application_name"]
    rows = db_sql(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name AND pid <> pg_backend_pid()",
        name=name,
    )
    return int(rows[0][0])


def _kill(url: str, pid: int) -> None:
    db_sql(url, "SELECT pg_terminate_backend(:pid)", pid=pid)
    wait_until(lambda: pid not in _listeners(url), message="the listening backend ended")


@pytest.mark.parametrize("engine_name", engine_params("sqlite", "postgres"), indirect=True)
def test_a_change_made_by_another_process_is_picked_up_at_the_next_signal(
    db_url: str, clock: FakeClock, made: list[JobScheduler]
) -> None:
    _running(made, db_url, clock)
    subprocess.run([sys.executable, "-c", _SCHEDULE_ONE, db_url], cwd=ROOT, check=True, timeout=TIMEOUT * 3)
    clock.advance(CHECK)  # one check, far from the poll
    assert _ran("x"), "the other process's change was not picked up before the poll"


def test_the_listener_reconnects_after_its_connection_is_killed(
    pg_named_url: str, clock: FakeClock, made: list[JobScheduler], caplog: pytest.LogCaptureFixture
) -> None:
    _running(made, pg_named_url, clock)
    wait_until(lambda: len(_listeners(pg_named_url)) == 1, message="one listening backend")
    (first,) = _listeners(pg_named_url)
    with caplog.at_level(logging.WARNING, logger="persched"):
        _kill(pg_named_url, first)
        wait_until(lambda: len(_listeners(pg_named_url)) == 1, message="listening again")
    assert "the connection listening for changes was lost, reconnecting" in caplog.text
    writer = JobScheduler(pg_named_url, clock=clock)
    made.append(writer)
    writer.schedule("x", jobs.block, 3600.0, args=("x",), start_in=0)
    clock.advance(CHECK)
    assert _ran("x"), "a change after the reconnect was not picked up before the poll"


def test_the_poll_picks_changes_up_while_the_listener_cannot_reconnect(
    pg_named_url: str, clock: FakeClock, made: list[JobScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    _running(made, pg_named_url, clock)
    wait_until(lambda: len(_listeners(pg_named_url)) == 1, message="one listening backend")

    def refused(self: PostgreSQLDialect, raw: object) -> None:
        raise psycopg.OperationalError("LISTEN refused by the test")

    monkeypatch.setattr(PostgreSQLDialect, "change_listener", refused)
    (listener,) = _listeners(pg_named_url)
    _kill(pg_named_url, listener)  # now nobody listens: the writer's NOTIFY is lost
    writer = JobScheduler(pg_named_url, clock=clock)
    made.append(writer)
    writer.schedule("x", jobs.block, 3600.0, args=("x",), start_in=0)
    clock.advance(POLL)
    assert _ran("x"), "the poll did not pick the change up"


def test_shutdown_closes_the_listening_connection(
    pg_named_url: str, clock: FakeClock, made: list[JobScheduler]
) -> None:
    sched = _running(made, pg_named_url, clock)
    wait_until(lambda: len(_listeners(pg_named_url)) == 1, message="one listening backend")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    wait_until(lambda: _sessions(pg_named_url) == 0, message="every session of the scheduler ended")
