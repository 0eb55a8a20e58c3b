"""The dashboard of a framework integration: made on first use in the process that serves it, never before a fork."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["ProcessDashboard", "whole_response"]


class ProcessDashboard:
    """A WSGI application that makes the dashboard (`make`) once per process, on its first request.

    Made at the application's start, a pre-forking master's engine would be shared by every worker;
    made on a request, it belongs to the process that serves, and reads the settings as they are then.
    """

    def __init__(self, make: Callable[[], WSGIApplication]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._app: WSGIApplication | None = None
        self._pid: int | None = None

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request with this process's dashboard."""
        return self._dashboard()(environ, start_response)

    def _dashboard(self) -> WSGIApplication:
        with self._lock:
            if self._app is None or self._pid != os.getpid():
                self._app, self._pid = self._make(), os.getpid()
            return self._app

    def close(self) -> None:
        """Close this process's dashboard's connections, if it made one (a request makes it anew)."""
        with self._lock:
            app, mine = self._app, self._pid == os.getpid()
            self._app = self._pid = None
        close = getattr(app, "close", None) if mine else None  # a forked parent's belongs to the parent
        if close is not None:
            close()


def whole_response(app: WSGIApplication, environ: WSGIEnvironment) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run `app` on `environ` to the end; return its status code, headers and body (it never streams)."""
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: object = None
    ) -> Callable[[bytes], object]:
        started[:] = [(status, headers)]
        return _no_write

    chunks = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    status, headers = started[0]
    return int(status.split(" ", 1)[0]), headers, body


def _no_write(data: bytes) -> None:
    raise NotImplementedError("the dashboard returns its body; it never calls write()")
