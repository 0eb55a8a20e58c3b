"""persched's dashboard mounted in Flask, Django and FastAPI apps, behind each app's own sign-in, over real HTTP.

Flask and Django are served by werkzeug's threaded server on a free port in
this process, FastAPI by a real uvicorn process. Each test: the app's own
page still answers; the dashboard answers under ``/persched`` with every
link, form and redirect under that prefix; someone the app did not sign in
(or signed in without the right to act) gets no buttons and a refused POST;
an operator signed in by the app pauses a job; the database shows exactly that.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import threading
import urllib.parse
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched.testing import FakeClock
from tests.multi._cluster import REPO, child_env, throttled
from tests.support.django_example import example_settings, persched_setting
from tests.support.frameworks import require
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from _typeshed.wsgi import WSGIApplication

JOB: Final = "app.report"
UVICORN_PORT: Final = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _database(tmp_path: Path, namespace: str) -> str:
    url = f"sqlite:///{tmp_path / 'mounted.db'}"
    sched = JobScheduler(url, clock=FakeClock(1_700_000_000.0), namespace=namespace)
    sched.schedule(JOB, "tests.support.jobs:record", 60.0, args=("r",))
    sched.schedule("app.other", "tests.support.jobs:record", 60.0, args=("o",))
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return url


def _paused(db: str, job_id: str) -> bool:
    return bool(sql(db, "SELECT paused FROM persched_jobs WHERE job_id = ?", (job_id,))[0][0])


class Client:
    """Requests to one server, with the cookies it set (no redirects followed)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    def send(
        self, method: str, path: str, form: dict[str, str] | None = None, host: str | None = None
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            headers = {"Host": host or f"127.0.0.1:{self.port}"}
            if self.cookies:
                headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            body = None
            if form is not None:
                body = urllib.parse.urlencode(form)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                headers["Origin"] = f"http://127.0.0.1:{self.port}"
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read().decode()
            for name, value in response.getheaders():
                if name.lower() == "set-cookie":
                    cookie_name, _, rest = value.partition("=")
                    self.cookies[cookie_name] = rest.split(";", 1)[0].strip('"')
            return response.status, {k.lower(): v for k, v in response.getheaders()}, text
        finally:
            conn.close()


def _check_mounted(client: Client, db: str, sign_in: Callable[[Client, str], None], home: str) -> None:
    """The scenario shared by the three frameworks (module docstring)."""
    status, _, text = client.send("GET", "/")
    assert status == 200
    assert home in text  # the app's own page
    status, _, page = client.send("GET", "/persched/")
    assert status == 200, page
    assert f'href="/persched/job?id={JOB}"' in page  # links under the prefix
    assert 'href="/persched/runs"' in page
    status, _, job = client.send("GET", f"/persched/job?id={JOB}")
    assert status == 200
    assert "btn-pause" not in job  # not signed in: read-only
    # A name the app was not given (DNS rebinding): the mount answers 400 whatever the app checks.
    for path in ("/persched/", f"/persched/job?id={JOB}"):
        status, _, refused = client.send("GET", path, host="evil.example")
        assert status == 400, (path, refused)
        assert JOB not in refused
    assert client.send("POST", "/persched/action", {"id": JOB, "action": "pause", "csrf": "x"})[0] == 403

    sign_in(client, "bob")  # signed in by the app, but not allowed to act
    assert "btn-pause" not in client.send("GET", f"/persched/job?id={JOB}")[2]
    assert client.send("POST", "/persched/action", {"id": JOB, "action": "pause", "csrf": "x"})[0] == 403
    assert not _paused(db, JOB)

    sign_in(client, "alice")  # an operator
    job = client.send("GET", f"/persched/job?id={JOB}")[2]
    assert 'action="/persched/action"' in job
    assert "signed in as alice" in job
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', job)
    assert found is not None
    status, headers, _ = client.send("POST", "/persched/action", {"id": JOB, "action": "pause", "csrf": found[1]})
    assert status == 303
    assert headers["location"] == f"/persched/job?id={JOB}&msg=paused"
    assert _paused(db, JOB)
    assert not _paused(db, "app.other")
    status, _, after = client.send("GET", headers["location"])
    assert status == 200
    assert 'id="btn-resume"' in after


def _serve_wsgi(app: WSGIApplication) -> Iterator[int]:
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


# -- Flask ----------------------------------------------------------------------------------------------


def test_flask_mounts_the_dashboard_behind_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require("flask")
    db = _database(tmp_path, "flask-example")
    monkeypatch.setenv("PERSCHED_DB", db)
    from examples import flask_app

    app = flask_app.create_app()  # Persched(dashboard_path="/persched", authorize=...): the integration

    def sign_in(client: Client, user: str) -> None:
        assert client.send("POST", "/login", {"user": user})[0] == 302

    try:
        for port in _serve_wsgi(app):
            _check_mounted(Client(port), db, sign_in, "the app's own pages")
    finally:
        flask_app.persched.shutdown(app, timeout=TIMEOUT)


# -- Django ---------------------------------------------------------------------------------------------


def test_django_mounts_the_dashboard_behind_its_authentication(tmp_path: Path) -> None:
    db = _database(tmp_path, "django-example")
    example_settings()
    from django.core import signing
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.utils import override_settings

    def sign_in(client: Client, user: str) -> None:
        # Stands for the project's login view: a cookie signed with SECRET_KEY (get_signed_cookie's format).
        client.cookies["user"] = signing.get_cookie_signer(salt="user").sign(user)

    def home(environ: dict[str, str], start_response: Callable[..., object]) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the project's own pages"]

    django_app = WSGIHandler()

    def app(environ: dict[str, str], start_response: Callable[..., object]) -> object:
        return (home if environ.get("PATH_INFO") == "/" else django_app)(environ, start_response)

    with override_settings(PERSCHED=persched_setting(db)):
        for port in _serve_wsgi(app):  # type: ignore[arg-type]  # a WSGI callable
            _check_mounted(Client(port), db, sign_in, "the project's own pages")


# -- FastAPI, under a real uvicorn process ----------------------------------------------------------------


@pytest.mark.slow
def test_fastapi_mounts_the_asgi_dashboard(tmp_path: Path) -> None:
    require("fastapi", "uvicorn")
    db = _database(tmp_path, "fastapi-example")
    log = tmp_path / "uvicorn.log"
    env = child_env()
    env["PERSCHED_DB"] = db
    command = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--host", "127.0.0.1", "--port", "0"]
    with log.open("wb") as out:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            throttled(lambda: UVICORN_PORT.search(log.read_text()) is not None or server.poll() is not None),
            timeout=3 * TIMEOUT,
            message="uvicorn listening",
        )
        found = UVICORN_PORT.search(log.read_text())
        assert found is not None, log.read_text()

        def sign_in(client: Client, user: str) -> None:
            assert client.send("POST", "/login", {"user": user})[0] == 303

        _check_mounted(Client(int(found[1])), db, sign_in, "the app's own pages")
    finally:
        server.terminate()
        try:
            server.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(TIMEOUT)
