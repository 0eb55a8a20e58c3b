"""The dashboard of a framework integration: made on first use in the process that serves it, never before a fork."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..web import dashboard

if TYPE_CHECKING:
    from collections.abc import Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["ProcessDashboard"]


class ProcessDashboard:
    """A WSGI application that makes ``persched.web.dashboard(url, **keywords)`` once per process, on its first request.

    The application's start may run in a process that forks its servers
    afterwards (gunicorn ``--preload``): a database engine made there would
    be shared by every worker. Made on a request, it belongs to the process
    that serves.
    """

    def __init__(self, url: str, **keywords: Any) -> None:  # noqa: ANN401 - persched.web.dashboard's keywords
        self._url = url
        self._keywords = keywords
        self._lock = threading.Lock()
        self._app: WSGIApplication | None = None
        self._pid: int | None = None

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request with this process's dashboard."""
        return self._dashboard()(environ, start_response)

    def _dashboard(self) -> WSGIApplication:
        with self._lock:
            if self._app is None or self._pid != os.getpid():
                self._app, self._pid = dashboard(self._url, **self._keywords), os.getpid()
            return self._app
