"""The dashboard attacked over HTTP: sessions, sign-in guessing, the token's leaks, redirects, paths, parameters.

Each test is an attack that was tried; the module's tests are the record
that it holds (or was fixed and now holds).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import urllib.parse
from contextlib import closing
from typing import TYPE_CHECKING

import pytest

from persched._interfaces.dashboard.actions import MESSAGES
from persched._interfaces.dashboard.auth import SignInLimiter
from tests.support.helpers import TIMEOUT
from tests.support.raw_http import get
from tests.web.conftest import START, TOKEN, serve_app
from tests.web.test_app import Reply, csrf_of, paused, request, sign_in

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.web.conftest import Dashboard


class Clock:
    """A monotonic clock the test moves (session expiry, the sign-in limit)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed(db: str, clock: Clock) -> Iterator[Dashboard]:
    """The dashboard with actions, its sessions and sign-in limit on `clock`."""
    yield from serve_app(db, TOKEN, monotonic=clock)


def _pause(dashboard: Dashboard, cookie: str, csrf: str) -> int:
    form = {"id": "good", "action": "pause", "csrf": csrf}
    return request(dashboard.url, "POST", "/action", form, {"Cookie": cookie}).status


def _db_rows(db: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"), timeout=TIMEOUT)) as conn:
        return conn.execute("SELECT * FROM persched_jobs ORDER BY job_id").fetchall()


# -- sessions ----------------------------------------------------------------------------------------


def test_sign_out_revokes_the_session_a_copied_cookie_included(timed: Dashboard) -> None:
    cookie = sign_in(timed)
    csrf = csrf_of(request(timed.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body)
    copied = cookie  # what an attacker copied from the browser
    out = request(timed.url, "POST", "/logout", {}, {"Cookie": cookie})
    assert out.status == 303
    assert "Max-Age=0" in out.headers["Set-Cookie"]
    assert _pause(timed, copied, csrf) == 403  # revoked on the server, not only cleared in the browser
    assert "btn-pause" not in request(timed.url, "GET", "/job?id=good", headers={"Cookie": copied}).body
    assert not paused(timed.db, "good")


def test_sessions_expire(timed: Dashboard, clock: Clock) -> None:
    cookie = sign_in(timed)
    csrf = csrf_of(request(timed.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body)
    clock.now += 8 * 3600  # the default lifetime
    assert _pause(timed, cookie, csrf) == 403
    assert not paused(timed.db, "good")


def test_the_cookie_is_named_after_the_port_and_never_outlives_the_process(db: str) -> None:
    cookies = []
    for dashboard in serve_app(db, TOKEN):
        cookie = sign_in(dashboard)
        assert cookie.startswith(f"persched_session_{dashboard.port}=")
        set_cookie = request(dashboard.url, "POST", "/login", {"token": TOKEN}).headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie
        assert "SameSite=Strict" in set_cookie
        assert "Max-Age=28800" in set_cookie
        assert "Path=/;" in set_cookie
        cookies.append(cookie)
    for dashboard in serve_app(db, TOKEN):  # a restart of the server: the same token, a new process state
        page = request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookies[0]}).body
        assert "btn-pause" not in page


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]", "LOCALHOST"])
def test_signing_in_under_a_name_every_local_service_shares_is_refused(dashboard: Dashboard, name: str) -> None:
    """Cookies ignore ports: one set for 127.0.0.1 would reach every service on it, which could replay it."""
    host = {"Host": f"{name}:{dashboard.port}"}
    own = f"http://persched.localhost:{dashboard.port}/login"
    refused = request(dashboard.url, "POST", "/login", {"token": TOKEN}, host)
    assert refused.status == 403
    assert "Set-Cookie" not in refused.headers
    assert own in refused.body
    form = request(dashboard.url, "GET", "/login", headers=host)
    assert form.status == 200
    assert f'href="{own}"' in form.body  # where to sign in instead
    assert 'name="token"' not in form.body
    assert request(dashboard.url, "GET", "/", headers=host).status == 200  # reading is fine there


def test_a_session_is_bound_to_the_host_it_was_signed_in_under(db: str) -> None:
    for dashboard in serve_app(db, TOKEN, allowed_hosts=["jobs.example"]):
        cookie = sign_in(dashboard)  # under persched.localhost:PORT
        for host, signed_in in ((f"persched.localhost:{dashboard.port}", True), ("jobs.example", False)):
            headers = {"Cookie": cookie, "Host": host}
            page = request(dashboard.url, "GET", "/job?id=good", headers=headers).body
            assert ("btn-pause" in page) is signed_in, host
        csrf = csrf_of(request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body)
        form = {"id": "good", "action": "pause", "csrf": csrf}
        replayed = request(dashboard.url, "POST", "/action", form, {"Cookie": cookie, "Host": "jobs.example"})
        assert replayed.status == 403
        assert not paused(db, "good")


# -- sign-in guessing ------------------------------------------------------------------------------


def test_failed_sign_ins_are_limited_and_the_right_token_waits_too(
    timed: Dashboard, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="persched"):
        for i in range(5):
            assert request(timed.url, "POST", "/login", {"token": f"guess-{i:08d}"}).status == 403
        limited = request(timed.url, "POST", "/login", {"token": TOKEN})
    assert limited.status == 429  # even the right token: guessing gets no answer while limited
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert "Set-Cookie" not in limited.headers
    assert any("too many failed sign-ins" in r.getMessage() for r in caplog.records)
    clock.now += 60
    assert request(timed.url, "POST", "/login", {"token": TOKEN}).status == 303


def _device_cookie(reply: Reply) -> str:
    """The "name=value" of the device cookie a sign-in set."""
    (found,) = [value for value in reply.headers.get_all("Set-Cookie") or [] if value.startswith("persched_device_")]
    assert "HttpOnly" in found
    assert "SameSite=Strict" in found
    return found.split(";", 1)[0]


def _sign_in_status(dashboard: Dashboard, token: str, cookie: str | None = None) -> int:
    return request(dashboard.url, "POST", "/login", {"token": token}, {"Cookie": cookie} if cookie else {}).status


def test_a_guesser_on_the_same_address_never_keeps_a_browser_that_signed_in_before_out(
    timed: Dashboard, clock: Clock
) -> None:
    """A local user guesses 9 tokens a minute from 127.0.0.1 for 10 minutes; the operator signs in every 10 s."""
    device = _device_cookie(request(timed.url, "POST", "/login", {"token": TOKEN}))
    clock.now += 8 * 3600  # the session ended; the browser keeps its device cookie
    refused = {"trusted": 0, "new": 0}
    guesses = 0
    start = clock.now
    for tick in range(600):  # seconds
        clock.now = start + tick + 0.25
        if tick % 7 == 0:  # ~9 a minute
            assert _sign_in_status(timed, f"guess-{guesses:08d}") in (403, 429)
            guesses += 1
        if tick % 10 == 5:
            refused["trusted"] += _sign_in_status(timed, TOKEN, device) != 303
            refused["new"] += _sign_in_status(timed, TOKEN) != 303
    assert refused["trusted"] == 0  # a browser that signed in before is never locked out
    assert refused["new"] > 0  # a new client on the guesser's address still waits (guessing gets no answer)


def test_a_trusted_browser_has_a_limit_of_its_own(timed: Dashboard, clock: Clock) -> None:
    device = _device_cookie(request(timed.url, "POST", "/login", {"token": TOKEN}))
    for i in range(5):
        assert _sign_in_status(timed, f"guess-{i:08d}", device) == 403
    assert _sign_in_status(timed, TOKEN, device) == 429  # guessing with a stolen device cookie is limited too
    assert _sign_in_status(timed, TOKEN) == 303  # its failures count against it alone
    clock.now += 60
    assert _sign_in_status(timed, TOKEN, device) == 303


def test_a_forged_or_stale_device_cookie_is_not_trusted(db: str, timed: Dashboard, clock: Clock) -> None:
    for other in serve_app(db, "another-token-0123456789"):  # a device cookie of another token
        stale = _device_cookie(request(other.url, "POST", "/login", {"token": "another-token-0123456789"}))
    name = f"persched_device_{timed.port}"
    for cookie in (f"{name}=forged.0123", f"{name}={stale.split('=', 1)[1]}", f"{name}="):
        for i in range(5):
            assert _sign_in_status(timed, f"guess-{i:08d}", cookie) == 403
        assert _sign_in_status(timed, TOKEN, cookie) == 429, cookie
        clock.now += 60  # the limit is over for the next cookie


def test_the_limit_is_per_client_and_in_all() -> None:
    clock = Clock()
    limiter = SignInLimiter(clock, per_client=2, total=3, window=60.0)
    limiter.failed("10.0.0.1")
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 60.0
    assert limiter.retry_after("10.0.0.2") is None  # another client may still try
    limiter.failed("10.0.0.2")
    assert limiter.retry_after("10.0.0.3") is not None  # 3 failures in all: every client waits
    assert limiter.retry_after("device:abc", trusted=True) is None  # a trusted browser: its own count only
    limiter.failed("device:abc", trusted=True)
    limiter.failed("device:abc", trusted=True)
    assert limiter.retry_after("device:abc", trusted=True) == 60.0
    clock.now += 60
    assert limiter.retry_after("10.0.0.1") is None


# -- the token: never in a log, a URL or a Referer ---------------------------------------------------


def test_the_token_is_never_logged_nor_put_in_a_url(dashboard: Dashboard, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="persched"):
        cookie = sign_in(dashboard)
        bad = request(dashboard.url, "GET", f"/login?token={TOKEN}")  # a token put in a URL by hand
        assert bad.status == 400  # not taken from a URL
        page = request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie})
        csrf = csrf_of(page.body)
        acted = request(
            dashboard.url, "POST", "/action", {"id": "good", "action": "run-now", "csrf": csrf}, {"Cookie": cookie}
        )
        request(dashboard.url, "POST", "/login", {"token": TOKEN + "x"})
    session = cookie.split("=", 1)[1]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (TOKEN, session, csrf):
        assert secret not in logged
        assert secret not in acted.headers["Location"]
        assert all(secret not in href for href in re.findall(r'href="([^"]*)"', page.body))
    assert page.headers["Referrer-Policy"] == "same-origin"
    assert 'type="password"' in request(dashboard.url, "GET", "/login").body  # the field never shows it


# -- redirects, paths --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["http://evil.example/", "//evil.example", "/\\evil.example"])
def test_no_redirect_target_is_taken_from_the_request(dashboard: Dashboard, target: str) -> None:
    assert request(dashboard.url, "POST", "/login", {"token": TOKEN, "next": target}).status == 400  # no such field
    assert request(dashboard.url, "GET", f"/login?next={target}").status == 400
    reply = request(dashboard.url, "POST", "/login", {"token": TOKEN})
    assert reply.headers["Location"] == "/"


@pytest.mark.parametrize(
    "path",
    ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/job/../../etc/passwd", "/static/..%2f..%2fpyproject.toml"],
)
def test_paths_outside_the_pages_are_404(dashboard: Dashboard, path: str) -> None:
    reply = get(dashboard.port, path)
    assert reply.status == 404
    assert "root:" not in reply.body
    assert "[project]" not in reply.body


# -- parameters ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/runs?before=%C2%B2",  # '²': str.isdigit() says yes, int() says no (it answered 500)
        "/job?id=good&before=%C2%B2",
        "/runs?before=-1",
        "/runs?before=1e9",
        "/runs?before=" + "9" * 19,
        "/runs?before=%EF%BC%91",  # a fullwidth digit one
        "/runs?before=",
        "/?after=" + "x" * 201,  # longer than a job id may be
        "/?after=%00",
        "/job?id=",
        "/job?id=%00",
        "/job?id=a%0Ab",
        "/job?id=" + "x" * 201,
        "/job?id=good&id=bad",  # given twice
        "/?page=2",  # unknown
        "/?" + "&".join(f"p{i}=1" for i in range(11)),  # too many
        "/?" + "a" * 2001,  # too long
        "/runs?outcome=%ff",  # not UTF-8
        "/job?id=good&msg=Session+expired%3A+sign+in+at+http%3A%2F%2Fevil.example%2Flogin",
    ],
)
def test_bad_parameters_are_400_with_a_reason(readonly: Dashboard, path: str) -> None:
    before = _db_rows(readonly.db)
    reply = request(readonly.url, "GET", path)
    assert reply.status == 400, (path, reply.status)
    assert re.search(r'id="problem">[^<]+<', reply.body)
    assert "evil.example" not in reply.body
    assert _db_rows(readonly.db) == before
    assert request(readonly.url, "GET", "/").status == 200  # and nothing broke for the next client


def test_good_numbers_still_page(readonly: Dashboard) -> None:
    assert request(readonly.url, "GET", "/runs?before=999999999999999999").status == 200
    assert request(readonly.url, "GET", "/job?id=good&before=0").status == 200


def test_the_status_note_shows_only_the_servers_own_texts(readonly: Dashboard) -> None:
    page = request(readonly.url, "GET", "/job?id=good&msg=paused").body
    assert f'id="message">{MESSAGES["paused"]}<' in page


def test_bad_action_forms_are_refused_and_write_nothing(dashboard: Dashboard) -> None:
    cookie = sign_in(dashboard)
    csrf = csrf_of(request(dashboard.url, "GET", "/job?id=good", headers={"Cookie": cookie}).body)
    before = _db_rows(dashboard.db)
    for form, status in [
        ({"id": "", "action": "pause"}, 400),
        ({"id": "go\x00od", "action": "pause"}, 400),
        ({"id": "x" * 201, "action": "pause"}, 400),
        ({"id": "good", "action": "explode"}, 400),
        ({"id": "good", "action": "pause", "ns": ""}, 400),
        ({"id": "good", "action": "pause", "ns": "n\x00"}, 400),
        ({"id": "good", "action": "pause", "extra": "1"}, 400),
    ]:
        reply = request(dashboard.url, "POST", "/action", {**form, "csrf": csrf}, {"Cookie": cookie})
        assert reply.status == status, form
    assert _db_rows(dashboard.db) == before


def test_a_one_shot_job_with_a_hostile_id_renders_escaped_and_acts(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from persched import JobScheduler
    from persched.testing import FakeClock

    url = f"sqlite:///{tmp_path / 'oneshot.db'}"
    sched = JobScheduler(url, clock=FakeClock(START), namespace="ñs<i>")
    job_id = "once <script>alert(1)</script> 日本"
    sched.schedule(
        job_id, "tests.support.jobs:record", run_at=datetime(2031, 1, 1, tzinfo=timezone.utc), args=("x" * 5000,)
    )
    sched.shutdown(wait=True, timeout=TIMEOUT)
    for dashboard in serve_app(url, TOKEN, namespace="ñs<i>"):
        cookie = sign_in(dashboard)
        query = urllib.parse.urlencode({"id": job_id})
        page = request(dashboard.url, "GET", f"/job?{query}", headers={"Cookie": cookie})
        assert page.status == 200
        assert "<script>" not in page.body
        assert "&lt;script&gt;" in page.body
        assert 'name="ns" value="ñs&lt;i&gt;"' in page.body
        form = {"id": job_id, "ns": "ñs<i>", "action": "pause", "csrf": csrf_of(page.body)}
        reply = request(dashboard.url, "POST", "/action", form, {"Cookie": cookie})
        assert reply.status == 303
        assert (
            MESSAGES["paused"]
            in request(dashboard.url, "GET", reply.headers["Location"], headers={"Cookie": cookie}).body
        )
