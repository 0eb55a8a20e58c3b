"""`persched.web.dashboard()`, the dashboard an application mounts: its own Host rules and its namespaces.

Mounted under Flask's ``DispatcherMiddleware`` (the documented recipe) the
application's ``TRUSTED_HOSTS`` never sees ``/persched/...``, and Django's
``ALLOWED_HOSTS`` is checked only by middleware a project may not have: the
dashboard answered ``Host: evil.example`` (DNS rebinding) with its job ids.
It now checks the Host itself (`allowed_hosts`, loopback names by default).
And ``namespace=`` only picked the first page: ``namespaces=`` confines it.
"""

from __future__ import annotations

import io
import logging
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

import pytest

from persched.errors import PerschedError
from persched.web import WebApp, dashboard
from tests.web.test_app import paused
from tests.web.test_namespaces import two_namespaces

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def namespaced(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'mounted.db'}"
    two_namespaces(url)  # "default": good, bad, skipper; "web": web.a, web.b
    return url


def call(
    app: WebApp, path: str, host: str | None = "127.0.0.1:5000", form: dict[str, str] | None = None
) -> tuple[int, str]:
    """One request to the WSGI application, mounted at /persched: (status, body)."""
    target, _, query = path.partition("?")
    body = urllib.parse.urlencode(form).encode() if form is not None else b""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET" if form is None else "POST",
        "SCRIPT_NAME": "/persched",
        "PATH_INFO": target,
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_PORT": "5000",
    }
    if host is not None:
        environ["HTTP_HOST"] = host
    statuses: list[str] = []
    text = b"".join(app(environ, lambda status, headers, exc_info=None: statuses.append(status)))  # type: ignore[arg-type]  # test double
    return int(statuses[0].split(" ", 1)[0]), text.decode()


def _ids(page: str) -> set[str]:
    return set(re.findall(r'<a href="/persched/job\?id=([^"&]+)[^"]*">', page))


def _operator(environ: object) -> str:
    return "alice"


@pytest.fixture
def opened() -> Iterator[list[WebApp]]:
    """The dashboards a test opened, closed at its end."""
    apps: list[WebApp] = []
    yield apps
    for app in apps:
        app.close()


def _mount(opened: list[WebApp], db: str, **options: Any) -> WebApp:  # noqa: ANN401 - dashboard()'s options
    app = dashboard(db, authorize=_operator, secret=b"test-secret", **options)
    assert isinstance(app, WebApp), app  # the database exists
    opened.append(app)
    return app


# -- Host -----------------------------------------------------------------------------------------------


def test_by_default_only_loopback_names_are_answered(
    namespaced: str, opened: list[WebApp], caplog: pytest.LogCaptureFixture
) -> None:
    app = _mount(opened, namespaced)
    for host in ("127.0.0.1:5000", "localhost:8000", "[::1]:80", "127.0.0.1", "LOCALHOST"):
        status, page = call(app, "/", host)
        assert status == 200, host
        assert "good" in _ids(page)
    with caplog.at_level(logging.WARNING, logger="persched"):
        for refused in ("evil.example", "evil.example:5000", "127.0.0.1.evil.example", None):
            status, page = call(app, "/", refused)
            assert status == 400, refused
            assert "good" not in page  # no job data
    assert any("allowed_hosts=" in r.getMessage() for r in caplog.records)


def test_allowed_hosts_name_the_applications_own(namespaced: str, opened: list[WebApp]) -> None:
    app = _mount(opened, namespaced, allowed_hosts=["app.example", "exact.example:8443"])
    assert call(app, "/", "app.example")[0] == 200
    assert call(app, "/", "app.example:443")[0] == 200
    assert call(app, "/", "exact.example:8443")[0] == 200
    assert call(app, "/", "exact.example:8444")[0] == 400
    assert call(app, "/", "127.0.0.1:5000")[0] == 200  # added to the loopback names, as `--allowed-host`
    assert call(app, "/", "evil.example")[0] == 400
    anything = _mount(opened, namespaced, allowed_hosts=["*"])  # the application checks the Host itself
    assert call(anything, "/", "evil.example")[0] == 200


@pytest.mark.parametrize("bad", [["a b"], ["evil.example/x"], "app.example", [""]])
def test_bad_allowed_hosts_are_refused_by_name(namespaced: str, bad: object) -> None:
    with pytest.raises(PerschedError, match="allowed_hosts"):
        dashboard(namespaced, allowed_hosts=bad)  # type: ignore[arg-type]  # bad on purpose


# -- namespaces -----------------------------------------------------------------------------------------


def test_namespaces_confine_the_pages(namespaced: str, opened: list[WebApp]) -> None:
    app = _mount(opened, namespaced, namespaces=["web"])
    status, page = call(app, "/")
    assert status == 200
    assert _ids(page) == {"web.a", "web.b"}  # the first of `namespaces` is the one shown
    assert ">default<" not in page  # not offered in the header either
    status, page = call(app, "/?all=1")
    assert status == 200
    assert _ids(page) == {"web.a", "web.b"}  # all = all of its namespaces
    status, page = call(app, "/runs?all=1")
    assert status == 200
    assert "web failure" in page
    assert "boom" not in page  # the failures of "default"'s job "bad"
    for path in ("/?ns=default", "/runs?ns=default", "/job?id=good&ns=default", "/job?id=good"):
        status, page = call(app, path)
        assert status == 404, path
        assert "good" not in _ids(page)
        assert "namespace default" not in page  # not even where the job is


def test_namespaces_confine_the_actions(namespaced: str, opened: list[WebApp]) -> None:
    app = _mount(opened, namespaced, namespaces=["web"])
    status, page = call(app, "/job?id=web.a")
    assert status == 200
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    status, _ = call(app, "/action", form={"id": "good", "ns": "default", "action": "pause", "csrf": found[1]})
    assert status == 404
    assert not paused(namespaced, "good")
    status, _ = call(app, "/action", form={"id": "web.a", "ns": "web", "action": "pause", "csrf": found[1]})
    assert status == 303
    assert paused(namespaced, "web.a")


def test_several_namespaces_and_the_one_shown_first(namespaced: str, opened: list[WebApp]) -> None:
    app = _mount(opened, namespaced, namespace="default", namespaces=["web", "default"])
    assert _ids(call(app, "/")[1]) == {"good", "bad", "skipper"}
    assert _ids(call(app, "/?ns=web")[1]) == {"web.a", "web.b"}
    assert _ids(call(app, "/?all=1")[1]) == {"good", "bad", "skipper", "web.a", "web.b"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"namespaces": []}, "namespaces"),
        ({"namespaces": "web"}, "namespaces"),
        ({"namespaces": ["web", ""]}, "namespaces"),
        ({"namespace": "default", "namespaces": ["web"]}, "namespace 'default' is not one of namespaces"),
    ],
)
def test_bad_namespaces_are_refused_by_name(namespaced: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(PerschedError, match=message):
        dashboard(namespaced, **options)


@pytest.mark.every_engine
class TestOnEveryEngine:
    """The confinement is SQL (the views' ``IN`` over the served namespaces): it holds on every engine."""

    def test_a_confined_dashboard_reads_its_namespaces_only(self, db_url: str, opened: list[WebApp]) -> None:
        two_namespaces(db_url)
        both = _mount(opened, db_url, namespace="default", namespaces=["web", "default"])
        assert _ids(call(both, "/?all=1")[1]) == {"good", "bad", "skipper", "web.a", "web.b"}
        assert "web failure" in call(both, "/runs?all=1")[1]
        confined = _mount(opened, db_url, namespaces=["web"])
        assert _ids(call(confined, "/?all=1")[1]) == {"web.a", "web.b"}
        status, page = call(confined, "/runs?all=1")
        assert status == 200
        assert "web failure" in page
        assert "boom" not in page
        assert call(confined, "/?ns=default")[0] == 404
