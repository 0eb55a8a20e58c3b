"""The dashboard's cancel action: behind the same sign-in and CSRF token as the others, shown for a running job."""

from __future__ import annotations

import sqlite3
import urllib.parse
from contextlib import closing
from typing import TYPE_CHECKING

from persched._interfaces.dashboard.actions import MESSAGES
from tests.support.helpers import TIMEOUT
from tests.web.test_app import csrf_of, request, sign_in

if TYPE_CHECKING:
    from tests.web.conftest import Dashboard


def _sql(db: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    path = urllib.parse.urlsplit(db.replace("sqlite:///", "file:///")).path
    with closing(sqlite3.connect(path, timeout=TIMEOUT)) as conn, conn:
        return conn.execute(statement, params).fetchall()


def _as_running(db: str, job_id: str) -> None:
    """Make the row look as a claim leaves it: another instance runs the job."""
    _sql(
        db,
        "UPDATE persched_jobs SET state = 'running', owner = 'elsewhere', running_for = next_run_at,"
        " lease_until = next_run_at WHERE job_id = ?",
        (job_id,),
    )


def test_cancel_is_offered_for_a_running_job_and_needs_the_csrf_token(dashboard: Dashboard) -> None:
    cookie = sign_in(dashboard)
    idle = request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body
    assert 'id="btn-cancel"' not in idle  # nothing in flight: no button
    _as_running(dashboard.db, "good")
    page = request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body
    assert 'id="btn-cancel"' in page
    form = {"id": "good", "action": "cancel"}
    assert request(dashboard.url, "POST", "/action", form, {"Cookie": cookie}).status == 403  # no CSRF token
    assert request(dashboard.url, "POST", "/action", {**form, "csrf": csrf_of(page)}).status == 403  # no session
    assert _sql(dashboard.db, "SELECT cancel_requested_at FROM persched_jobs WHERE job_id = 'good'") == [(None,)]

    ok = request(dashboard.url, "POST", "/action", {**form, "csrf": csrf_of(page)}, {"Cookie": cookie})
    assert ok.status == 303
    after = request(dashboard.url, "GET", ok.headers["Location"], headers={"Cookie": cookie}).body
    assert MESSAGES["cancel"] in after
    ((requested,),) = _sql(dashboard.db, "SELECT cancel_requested_at FROM persched_jobs WHERE job_id = 'good'")
    assert requested is not None


def test_cancel_of_a_job_with_no_run_in_flight_says_so(dashboard: Dashboard) -> None:
    cookie = sign_in(dashboard)
    csrf = csrf_of(request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body)
    reply = request(
        dashboard.url, "POST", "/action", {"id": "good", "action": "cancel", "csrf": csrf}, {"Cookie": cookie}
    )
    assert reply.status == 303
    after = request(dashboard.url, "GET", reply.headers["Location"], headers={"Cookie": cookie}).body
    assert MESSAGES["not-running"] in after
    assert _sql(dashboard.db, "SELECT cancel_requested_at FROM persched_jobs WHERE job_id = 'good'") == [(None,)]
