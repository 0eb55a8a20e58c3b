"""The dashboard over HTTP (no browser): pages, pagination, escaping, the token, CSRF, read-only opening."""

from __future__ import annotations

import http.client
import re
import sqlite3
import urllib.parse
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect

from persched import JobScheduler
from persched._interfaces.dashboard.actions import MESSAGES
from persched._interfaces.dashboard.app import WebApp
from persched._interfaces.dashboard.serve import serve
from persched._interfaces.existing import open_existing
from persched._store import views as _views
from persched.errors import PerschedError, StoreError
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT
from tests.web.conftest import START, TOKEN, serve_app

if TYPE_CHECKING:
    from pathlib import Path

    from tests.web.conftest import Dashboard


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str


def request(
    base: str, method: str, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> Reply:
    """One request, no redirects followed, no cookies kept (the test passes them).

    Its Host is the dashboard's own name, ``persched.localhost:PORT``, unless `headers` give one.
    """
    split = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(split.netloc, timeout=TIMEOUT)
    try:
        body = None if form is None else urllib.parse.urlencode(form)
        sent = {"Host": f"persched.localhost:{split.port}", **(headers or {})}
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return Reply(response.status, response.headers, response.read().decode())
    finally:
        conn.close()


def sign_in(dashboard: Dashboard) -> str:
    """Sign in with the token; return the Cookie header value."""
    reply = request(dashboard.url, "POST", "/login", {"token": TOKEN})
    assert reply.status == 303, reply.body
    cookie = reply.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    return cookie.split(";", 1)[0]


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


def paused(db: str, job_id: str) -> bool:
    path = urllib.parse.urlsplit(db.replace("sqlite:///", "file:///")).path
    with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn:
        (flag,) = conn.execute("SELECT paused FROM persched_jobs WHERE job_id = ?", (job_id,)).fetchone()
    return bool(flag)


def test_every_page_renders_the_history(readonly: Dashboard) -> None:
    jobs = request(readonly.url, "GET", "/")
    assert jobs.status == 200
    for job_id in ("good", "bad", "skipper"):
        assert f">{job_id}</a>" in jobs.body
    assert "every 10 s" in jobs.body
    assert "scheduled: <b>3</b>" in jobs.body

    job = request(readonly.url, "GET", "/job?id=bad")
    assert job.status == 200
    assert 'id="chart-lateness"' in job.body
    assert 'id="chart-duration"' in job.body
    assert "RuntimeError: boom &lt;b&gt;&amp;" in job.body  # escaped, never markup
    assert "<b>&" not in job.body

    skipper = request(readonly.url, "GET", "/job?id=skipper")
    assert 'class="missed-range"' in skipper.body

    runs = request(readonly.url, "GET", "/runs?outcome=error")
    assert runs.status == 200
    outcomes = re.findall(r'<td class="(ok|error|lost|missed|running)">', runs.body)
    assert outcomes
    assert set(outcomes) == {"error"}


def test_unknown_job_and_bad_filter(readonly: Dashboard) -> None:
    assert request(readonly.url, "GET", "/job?id=nope").status == 404
    assert request(readonly.url, "GET", "/runs?outcome=exploded").status == 400
    assert request(readonly.url, "GET", "/nowhere").status == 404


def test_jobs_are_paginated_by_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'many.db'}"
    sched = JobScheduler(url, clock=FakeClock(START))
    for i in range(120):
        sched.schedule(f"job-{i:03d}", "tests.support.jobs:record", 60.0, args=("x",))
    sched.shutdown(wait=True, timeout=TIMEOUT)
    for dashboard in serve_app(url, None):
        seen: list[str] = []
        path = "/"
        while path:
            page = request(dashboard.url, "GET", path).body
            ids = re.findall(r">(job-\d{3})</a>", page)
            assert len(ids) <= 50
            seen += ids
            more = re.search(r'<a href="(/\?after=[^"]+)">next page', page)
            path = more.group(1).replace("&amp;", "&") if more else ""
        assert seen == [f"job-{i:03d}" for i in range(120)]


def test_the_counts_say_they_are_of_the_current_definition(readonly: Dashboard) -> None:
    page = request(readonly.url, "GET", "/job?id=good").body
    counts = r'<dd id="job-runs">\d+ \(0 errors\) of generation 1, the current definition; last outcome ok<'
    assert re.search(counts, page), page
    listing = request(readonly.url, "GET", "/").body
    assert 'title="runs of the current definition (generation); replacing a job starts them again"' in listing


def test_readonly_dashboard_has_no_buttons_and_refuses_actions(readonly: Dashboard) -> None:
    page = request(readonly.url, "GET", "/job?id=good")
    assert "btn-pause" not in page.body
    assert "Sign in" not in page.body
    reply = request(readonly.url, "POST", "/action", {"id": "good", "action": "pause", "csrf": "x"})
    assert reply.status == 403
    assert request(readonly.url, "POST", "/login", {"token": TOKEN}).status == 403
    assert not paused(readonly.db, "good")


def test_actions_need_the_token_a_session_and_the_csrf_token(dashboard: Dashboard) -> None:
    assert "btn-pause" not in request(dashboard.url, "GET", "/job?id=good").body  # not signed in
    assert request(dashboard.url, "POST", "/action", {"id": "good", "action": "pause"}).status == 403
    assert request(dashboard.url, "POST", "/login", {"token": "wrong-token-123"}).status == 403

    cookie = sign_in(dashboard)
    page = request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body
    assert 'id="btn-pause"' in page
    csrf = csrf_of(page)
    form = {"id": "good", "action": "pause"}
    # A forged cookie, no CSRF token, a wrong one, another site's Origin: all refused.
    forged = cookie.split("=", 1)[0] + "=" + "A" * 43  # the cookie's name, a value no sign-in made
    assert request(dashboard.url, "POST", "/action", {**form, "csrf": csrf}, {"Cookie": forged}).status == 403
    assert request(dashboard.url, "POST", "/action", form, {"Cookie": cookie}).status == 403
    assert request(dashboard.url, "POST", "/action", {**form, "csrf": "0" * 64}, {"Cookie": cookie}).status == 403
    evil = {"Cookie": cookie, "Origin": "http://evil.example"}
    assert request(dashboard.url, "POST", "/action", {**form, "csrf": csrf}, evil).status == 403
    assert not paused(dashboard.db, "good")

    ok = request(
        dashboard.url, "POST", "/action", {**form, "csrf": csrf}, {"Cookie": cookie, "Origin": dashboard.own_url}
    )
    assert ok.status == 303
    assert paused(dashboard.db, "good")
    after = request(dashboard.url, "GET", ok.headers["Location"], headers={"Cookie": cookie}).body
    assert MESSAGES["paused"] in after
    assert 'id="btn-resume"' in after


def test_actions_are_logged(dashboard: Dashboard, caplog: pytest.LogCaptureFixture) -> None:
    cookie = sign_in(dashboard)
    csrf = csrf_of(request(dashboard.url, "GET", "/job?id=bad", headers={"Cookie": cookie}).body)
    with caplog.at_level("INFO", logger="persched"):
        reply = request(
            dashboard.url, "POST", "/action", {"id": "bad", "action": "run-now", "csrf": csrf}, {"Cookie": cookie}
        )
    assert reply.status == 303
    said = [r.getMessage() for r in caplog.records]
    assert any("run-now of job 'bad' (namespace 'default') by a token session from 127.0.0.1" in m for m in said), said


def test_the_dashboard_never_migrates(tmp_path: Path) -> None:
    missing = tmp_path / "absent.db"
    with pytest.raises(StoreError):
        open_existing(f"sqlite:///{missing}")
    assert not missing.exists()
    older = tmp_path / "older.db"
    with closing(sqlite3.connect(older)) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('0003')")
        conn.commit()
    with pytest.raises(StoreError, match="persched migrate"):
        serve(f"sqlite:///{older}", "127.0.0.1", 0, None, lambda url: None)
    with closing(sqlite3.connect(older)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0003",)]


def test_a_short_token_is_refused(db: str) -> None:
    with pytest.raises(PerschedError, match="--token"):
        serve(db, "127.0.0.1", 0, "short", lambda url: None)


def test_it_reads_while_a_scheduler_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    clock = FakeClock(START)
    from tests.web.conftest import fill

    sched = fill(url, clock)
    try:
        for dashboard in serve_app(url, TOKEN):
            before = request(dashboard.url, "GET", "/job?id=good").body.count('<td class="ok">')
            clock.advance(10)
            assert sched.wait_idle(TIMEOUT)
            after = request(dashboard.url, "GET", "/job?id=good").body.count('<td class="ok">')
            assert after == before + 1
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("outcome", "job_id", "index"),
    [
        (None, None, None),  # the primary key, backwards
        (None, "good", "ix_persched_runs_job_id_run_id"),
        ("error", None, "ix_persched_runs_outcome"),
        ("missed", None, "ix_persched_runs_outcome"),
        ("running", None, "ix_persched_runs_open"),
    ],
)
def test_runs_queries_use_an_index(db: str, outcome: str | None, job_id: str | None, index: str | None) -> None:
    plan = _plan(db, _views.runs_query(job_id=job_id, outcome=outcome, before=12345, limit=51))
    if outcome != "running":  # open runs are few: sorting them is cheap
        assert "USE TEMP B-TREE" not in plan  # no sort of the whole history
    if index is None:
        assert "USING INTEGER PRIMARY KEY" in plan, plan
    else:
        assert index in plan, plan


def test_jobs_query_uses_the_primary_key(db: str) -> None:
    plan = _plan(db, _views.jobs_query("good", 51))
    assert "sqlite_autoindex_persched_jobs_1" in plan or "PRIMARY KEY" in plan, plan
    assert "USE TEMP B-TREE" not in plan


def _plan(db: str, query: object) -> str:
    compiled = query.compile(dialect=sqlite_dialect.dialect(), compile_kwargs={"literal_binds": True})  # type: ignore[attr-defined]  # a Select
    path = db.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {compiled}").fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def test_web_app_is_a_wsgi_callable(db: str) -> None:
    store = open_existing(db)
    try:
        app = WebApp(store, None)
        statuses: list[str] = []
        body = b"".join(
            app(
                {"REQUEST_METHOD": "GET", "PATH_INFO": "/runs", "QUERY_STRING": ""},
                lambda status, headers, exc_info=None: statuses.append(status),  # type: ignore[arg-type]  # test double
            )
        )
    finally:
        store.engine.dispose()
    assert statuses == ["200 OK"]
    assert b"<h1>Runs</h1>" in body
