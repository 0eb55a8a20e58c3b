"""`persched.web.dashboard` on a database that does not exist yet: the application starts, the pages say so.

A fresh deploy starts the web application before (or while) its first
scheduler makes the database: the dashboard answers 503 with one line that
says what is missing, creates nothing, and serves the pages once the
database is there (docs/reference/behaviour.md#the-dashboard-before-its-database-exists).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from typing import TYPE_CHECKING, Any

import pytest

from persched import JobScheduler
from persched._store.revision import VERSION_TABLE
from persched.errors import SchemaVersionError, StoreError
from persched.web import AwaitingDatabase, dashboard
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from pathlib import Path


def _get(app: Any, path: str = "/", host: str = "127.0.0.1:8000") -> tuple[str, bytes]:  # noqa: ANN401 - WSGI
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
        statuses.append(status)

    body = b"".join(
        app(
            {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "HTTP_HOST": host},
            start_response,
        )
    )
    return statuses[0], body


def test_a_missing_file_answers_503_creates_nothing_and_serves_once_a_scheduler_made_it(tmp_path: Path) -> None:
    path = tmp_path / "later.db"
    url = f"sqlite:///{path}"
    app = dashboard(url)  # the application's start: no error
    try:
        status, body = _get(app)
        assert status == "503 Service Unavailable"
        assert b"no persched database yet" in body
        assert not path.exists()  # never created by the dashboard
        with JobScheduler(url) as sched:
            sched.schedule("made", "tests.support.jobs:record", 3600.0, args=("x",))
        status, body = _get(app)
        assert status == "200 OK"
        assert b"made" in body
    finally:
        app.close()


def test_the_503_answers_only_the_hosts_the_dashboard_would(tmp_path: Path) -> None:
    """Its reason names the database's file: a Host the dashboard refuses gets the 400, not the path."""
    path = tmp_path / "secret-name.db"
    app = dashboard(f"sqlite:///{path}", allowed_hosts=["app.example.com"])
    try:
        status, body = _get(app, host="rebound.example")
        assert status == "400 Bad Request"
        assert b"secret-name" not in body
        for allowed in ("app.example.com", "127.0.0.1:8000", "localhost"):
            status, body = _get(app, host=allowed)
            assert status == "503 Service Unavailable", allowed
            assert b"secret-name" in body
    finally:
        app.close()


def test_a_file_without_the_schema_answers_503_until_it_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # a file, no persched tables (a scheduler's start will make them)
    url = f"sqlite:///{path}"
    app = dashboard(url)
    try:
        status, body = _get(app, "/runs")
        assert status == "503 Service Unavailable"
        assert b"persched migrate" in body  # the line says how to make it now
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []  # nothing migrated
        with JobScheduler(url):
            assert _get(app, "/runs")[0] == "200 OK"
    finally:
        app.close()


def test_a_newer_schema_still_raises_at_once(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    with JobScheduler(f"sqlite:///{path}"):
        pass
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")  # noqa: S608 - a constant
        conn.commit()
    with pytest.raises(SchemaVersionError):  # old code on a newer database: a deploy error, said at start
        dashboard(f"sqlite:///{path}")


def test_an_attempt_that_hangs_holds_up_no_other_request_and_one_dashboard_is_kept() -> None:
    """A database server that does not answer: one request waits on it, the others are answered meanwhile."""
    entered, release = threading.Event(), threading.Event()
    opened: list[FakeDashboard] = []

    class FakeDashboard:
        closed = False

        def __call__(self, environ: object, start_response: Any) -> list[bytes]:  # noqa: ANN401 - WSGI's
            start_response("200 OK", [])
            return [b"the dashboard"]

        def close(self) -> None:
            self.closed = True

    def open_dashboard() -> FakeDashboard:
        if threading.current_thread().name == "hangs":
            entered.set()
            assert release.wait(TIMEOUT)
        opened.append(FakeDashboard())
        return opened[-1]

    app = AwaitingDatabase(open_dashboard, StoreError("sqlite:///x.db", "no such file"))  # type: ignore[arg-type]  # a fake WebApp
    answers: list[tuple[str, bytes]] = []
    hanging = threading.Thread(target=lambda: answers.append(_get(app)), name="hangs")
    hanging.start()
    assert entered.wait(TIMEOUT)
    assert _get(app) == ("200 OK", b"the dashboard")  # not held up by the hanging attempt
    release.set()
    hanging.join(TIMEOUT)
    assert answers == [("200 OK", b"the dashboard")]
    assert [d.closed for d in opened] == [False, True]  # the first opened is kept, the late one closed
