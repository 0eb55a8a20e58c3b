"""Refusals are logged without flooding the log: the first of each kind in full, then one line a minute with the count.

One client refused thousands of times (a wrong Host, wrong tokens, forms
without a session) wrote a WARNING each: 26,313 lines in 20 s. Now each kind
of refusal writes its first line in full, counts the others, and writes the
count with the first refusal of that kind after a minute
(docs/observability.md#the-dashboard-persched-web).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from persched._interfaces.http.hosts import HostCheck, HostRules
from persched._interfaces.http.refusals import REFUSAL_LOG_SECONDS, RefusalLog
from tests.web.conftest import TOKEN, serve_app
from tests.web.test_app import request
from tests.web.test_attacks import Clock

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from tests.web.conftest import Dashboard

logger = logging.getLogger("persched.tests.refusals")


def _lines(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level and r.name.startswith("persched")]


def test_the_first_refusal_is_logged_and_the_rest_counted_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refusals = RefusalLog(logger, clock)
    with caplog.at_level(logging.INFO, logger="persched"):
        for i in range(1000):
            refusals.refused("host", logging.WARNING, "refused Host %r", f"evil-{i}.example")
        refusals.refused("sign-in", logging.WARNING, "wrong token from %s", "127.0.0.1")
        assert _lines(caplog) == ["refused Host 'evil-0.example'", "wrong token from 127.0.0.1"]
        clock.now += REFUSAL_LOG_SECONDS - 0.5
        refusals.refused("host", logging.WARNING, "refused Host %r", "late.example")
        assert len(_lines(caplog)) == 2  # still within the minute: counted
        clock.now += 0.75
        refusals.refused("host", logging.WARNING, "refused Host %r", "next.example")
    assert _lines(caplog)[2:] == [
        "1000 more in the last 60 s like: refused Host 'evil-0.example'",
        "refused Host 'next.example'",
    ]


def test_a_flood_of_wrong_hosts_writes_one_line(caplog: pytest.LogCaptureFixture) -> None:
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    check = HostCheck(app, HostRules("127.0.0.1", 8765), "web", monotonic=Clock())
    with caplog.at_level(logging.WARNING, logger="persched"):
        for _ in range(5000):
            body = check({"HTTP_HOST": "evil.example", "REQUEST_METHOD": "GET"}, lambda status, headers: None)  # type: ignore[arg-type]  # a stub start_response
            assert b"400 Bad Request" in b"".join(body)
    (line,) = _lines(caplog)
    assert "'evil.example'" in line
    assert "--allowed-host" in line


@pytest.fixture
def timed(db: str) -> Iterator[tuple[Dashboard, Clock]]:
    clock = Clock()
    for dashboard in serve_app(db, TOKEN, monotonic=clock):
        yield dashboard, clock


def test_a_flood_of_wrong_sign_ins_and_forms_writes_a_line_of_each(
    timed: tuple[Dashboard, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    dashboard, clock = timed
    with caplog.at_level(logging.WARNING, logger="persched"):
        for i in range(40):
            assert request(dashboard.url, "POST", "/login", {"token": f"guess-{i:08d}"}).status in (403, 429)
            assert request(dashboard.url, "POST", "/action", {"id": "good", "action": "pause"}).status == 403
        lines = _lines(caplog)
        assert len(lines) == 3, lines  # a wrong token, too many failures, a form without a session
        clock.now += REFUSAL_LOG_SECONDS
        assert request(dashboard.url, "POST", "/login", {"token": "guess-again-000"}).status == 403
    summary = _lines(caplog)[3]
    assert summary == "4 more in the last 60 s like: web: sign-in refused (wrong token) from 127.0.0.1", summary
