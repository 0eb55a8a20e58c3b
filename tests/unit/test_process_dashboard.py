"""The integrations' per-process dashboard: made on a first request, closed with the application's scheduler."""

from __future__ import annotations

from typing import Any

from persched.integrations._dashboard import ProcessDashboard, whole_response


class FakeDashboard:
    """A WSGI application that counts whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def __call__(self, environ: object, start_response: Any) -> list[bytes]:  # noqa: ANN401 - WSGI's
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the dashboard"]

    def close(self) -> None:
        self.closed = True


def test_close_closes_the_dashboard_this_process_made_and_a_request_makes_it_anew() -> None:
    made: list[FakeDashboard] = []

    def make() -> FakeDashboard:
        made.append(FakeDashboard())
        return made[-1]

    dashboard = ProcessDashboard(make)
    dashboard.close()  # nothing made yet: nothing to close
    assert made == []
    assert whole_response(dashboard, {"REQUEST_METHOD": "GET"})[2] == b"the dashboard"
    assert whole_response(dashboard, {"REQUEST_METHOD": "GET"})[2] == b"the dashboard"
    assert len(made) == 1
    dashboard.close()
    assert made[0].closed
    whole_response(dashboard, {"REQUEST_METHOD": "GET"})
    assert len(made) == 2
    assert not made[1].closed
