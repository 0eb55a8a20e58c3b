"""The dashboard on a database that holds two namespaces: each page and action in its own namespace.

"default" has the three jobs of `fill` ("good", "bad", "skipper"); "web"
has "web.a" and "web.b", each with runs of its own.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from contextlib import closing
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched._interfaces.dashboard.actions import MESSAGES
from persched._interfaces.http.server import Limits
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT
from tests.support.raw_http import connect, get
from tests.web.conftest import START, TOKEN, fill, serve_app
from tests.web.test_app import csrf_of, request, sign_in

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.web.conftest import Dashboard


def two_namespaces(url: str) -> None:
    """Fill `url` with the jobs of "default" and of "web", each with history; no scheduler left running."""
    clock = FakeClock(START)
    fill(url, clock).shutdown(wait=True, timeout=TIMEOUT)
    web = JobScheduler(url, clock=clock, namespace="web")
    web.schedule("web.a", "tests.support.jobs:record", 10.0, args=("a",))
    web.schedule("web.b", "tests.support.jobs:fail", 10.0, args=("b", "web failure"))
    web.start()
    for _ in range(2):
        clock.advance(10)
        assert web.wait_idle(TIMEOUT)
    web.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def namespaced(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'namespaces.db'}"
    two_namespaces(url)
    return url


def _ids(page: str) -> set[str]:
    return set(re.findall(r'<a href="/job\?id=([^"&]+)[^"]*">', page))


def _row(db: str, job_id: str) -> tuple[int, str, int]:
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"), timeout=TIMEOUT)) as conn:
        paused, state, generation = conn.execute(
            "SELECT paused, state, generation FROM persched_jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
    return paused, state, generation


@pytest.fixture
def web_dashboard(namespaced: str) -> Iterator[Dashboard]:
    """`persched --namespace web web --token ...`."""
    yield from serve_app(namespaced, TOKEN, namespace="web")


def test_the_dashboard_serves_its_namespace_and_offers_the_others(web_dashboard: Dashboard) -> None:
    url = web_dashboard.url
    jobs = request(url, "GET", "/").body
    assert _ids(jobs) == {"web.a", "web.b"}  # only its own namespace's jobs
    assert 'id="namespace">namespace <b>web</b>' in jobs
    assert 'href="/?ns=default"' in jobs  # the other namespace, offered
    assert "scheduled: <b>2</b>" in jobs  # counts of this namespace
    default = request(url, "GET", "/?ns=default").body
    assert _ids(default) == {"good", "bad", "skipper"}
    assert "scheduled: <b>3</b>" in default
    everything = request(url, "GET", "/?all=1").body
    assert _ids(everything) == {"good", "bad", "skipper", "web.a", "web.b"}
    assert "<th>Namespace</th>" in everything
    assert '<td class="ns">web</td>' in everything
    assert "scheduled: <b>5</b>" in everything
    # Links keep each job's namespace: a default job opens from the all-namespaces view.
    assert 'href="/job?id=good&amp;ns=default"' in everything
    assert 'href="/job?id=web.a"' in everything  # the dashboard's own namespace needs no ns=


def test_a_job_page_looks_in_its_namespace_only(web_dashboard: Dashboard) -> None:
    url = web_dashboard.url
    page = request(url, "GET", "/job?id=web.a")
    assert page.status == 200
    assert 'id="job-namespace">web<' in page.body
    elsewhere = request(url, "GET", "/job?id=good")  # a job of "default": not in "web"
    assert elsewhere.status == 404
    assert "in namespace &#x27;web&#x27;" in elsewhere.body
    assert 'href="/job?id=good&amp;ns=default"' in elsewhere.body  # where it is
    assert request(url, "GET", "/job?id=good&ns=default").status == 200
    assert request(url, "GET", "/job?id=web.a&ns=default").status == 404


def test_runs_of_one_namespace_and_of_all(web_dashboard: Dashboard) -> None:
    url = web_dashboard.url
    runs = request(url, "GET", "/runs").body
    assert set(re.findall(r'/job\?id=([^"&]+)', runs)) == {"web.a", "web.b"}
    errors = request(url, "GET", "/runs?outcome=error&ns=default").body
    assert set(re.findall(r'/job\?id=([^"&]+)', errors)) == {"bad"}
    everything = request(url, "GET", "/runs?all=1").body
    assert set(re.findall(r'/job\?id=([^"&]+)', everything)) == {"good", "bad", "skipper", "web.a", "web.b"}
    assert '<td class="ns">default</td>' in everything


def test_actions_stay_in_the_jobs_namespace(web_dashboard: Dashboard) -> None:
    url, db = web_dashboard.url, web_dashboard.db
    cookie = sign_in(web_dashboard)
    page = request(url, "GET", "/job?id=good&ns=default", headers={"Cookie": cookie}).body
    assert 'name="ns" value="default"' in page
    csrf = csrf_of(page)
    done = request(url, "POST", "/action", {"id": "good", "ns": "default", "action": "pause", "csrf": csrf},
                   {"Cookie": cookie})  # fmt: skip
    assert done.status == 303
    assert done.headers["Location"] == "/job?id=good&ns=default&msg=paused"
    assert _row(db, "good")[0] == 1
    after = request(url, "GET", done.headers["Location"], headers={"Cookie": cookie}).body
    assert MESSAGES["paused"] in after
    # The same job asked for in the wrong namespace: nothing changes there or anywhere.
    before = _row(db, "web.a"), _row(db, "bad")
    wrong = request(url, "POST", "/action", {"id": "bad", "ns": "web", "action": "deschedule", "csrf": csrf},
                    {"Cookie": cookie})  # fmt: skip
    assert wrong.status == 303
    assert wrong.headers["Location"] == "/?msg=no-job"
    assert (_row(db, "web.a"), _row(db, "bad")) == before
    # A form without ns acts in the dashboard's namespace ("web"), as the CLI's --namespace would.
    mine = request(url, "POST", "/action", {"id": "web.b", "action": "pause", "csrf": csrf}, {"Cookie": cookie})
    assert mine.headers["Location"] == "/job?id=web.b&msg=paused"
    assert _row(db, "web.b")[0] == 1


@pytest.mark.parametrize(
    "path",
    [
        "/?ns=",  # empty
        "/?ns=%00",  # NUL
        "/?ns=" + "n" * 101,  # over 100 characters
        "/?ns=a%0Ab",  # a control character
        "/?ns=web&all=1",
        "/?all=yes",
        "/job?id=web.a&all=1",
        "/runs?ns=%ff",  # not UTF-8
    ],
)
def test_bad_namespaces_are_400_with_the_reason(web_dashboard: Dashboard, path: str) -> None:
    reply = request(web_dashboard.url, "GET", path)
    assert reply.status == 400, reply.body
    assert 'id="problem">' in reply.body


def test_a_unicode_namespace_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'unicode.db'}"
    sched = JobScheduler(url, clock=FakeClock(START), namespace="équipe-日本")
    sched.schedule("ü.job", "tests.support.jobs:record", 10.0, args=("x",))
    sched.shutdown(wait=True, timeout=TIMEOUT)
    for dashboard in serve_app(url, None):
        page = request(dashboard.url, "GET", "/?ns=%C3%A9quipe-%E6%97%A5%E6%9C%AC")
        assert page.status == 200
        assert "ü.job" in page.body
        assert request(dashboard.url, "GET", "/?all=1").body.count("équipe-日本") >= 2  # link and column


IDLE_TIMEOUT: Final = TIMEOUT / 2  # the server's read timeout: the idle connections' recv() is bounded by TIMEOUT


def test_idle_connections_are_closed_while_the_namespace_views_are_served(namespaced: str) -> None:
    """Fifty connections that never send a byte: every view still answers before they time out, no thread
    is added, and each idle connection is closed after the read timeout."""
    limits = Limits(workers=2, max_connections=64, read_timeout=IDLE_TIMEOUT)
    for dashboard in serve_app(namespaced, None, namespace="web", limits=limits):
        assert dashboard.server.wait_serving(TIMEOUT)
        threads = threading.active_count()
        idle = [connect(dashboard.port) for _ in range(50)]
        try:
            for path in ("/", "/?ns=default", "/?all=1", "/runs?all=1", "/job?id=web.a", "/job?id=good&ns=default"):
                assert get(dashboard.port, path, timeout=IDLE_TIMEOUT).status == 200, path
            assert threading.active_count() == threads
            for sock in idle:
                assert sock.recv(4096).startswith(b"HTTP/1.0 408 ")  # bounded by the socket's TIMEOUT
        finally:
            for sock in idle:
                sock.close()
