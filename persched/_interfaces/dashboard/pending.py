"""The mounted dashboard before its database exists: 503 with the reason, until a scheduler has made it.

See docs/explanation/interfaces.md, "Before the database exists".
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, ParamSpec

from ... import _loggers
from ...errors import StoreError
from ..http.hosts import HostCheck, HostRules

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from .app import WebApp

__all__ = ["AwaitingDatabase", "until_the_database_exists"]

logger = logging.getLogger(_loggers.WEB)

P = ParamSpec("P")


class AwaitingDatabase:
    """A WSGI application that opens the dashboard with `open_dashboard` on a request, once it can."""

    def __init__(self, open_dashboard: Callable[[], WebApp], why: StoreError, hosts: HostRules | None = None) -> None:
        self._open = open_dashboard
        self._lock = threading.Lock()  # guards _app only: an attempt to open runs outside it
        self._app: WebApp | None = None
        self._why = why
        # Default: the dashboard's own default, loopback names only.
        rules = HostRules(None, None, (), "allowed_hosts=") if hosts is None else hosts
        self._unavailable = HostCheck(self._unavailable_answer, rules, "web")

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer with the dashboard if the database can be opened now, else (to an allowed Host) 503 and why."""
        app = self._opened()
        if app is not None:
            return app(environ, start_response)
        return self._unavailable(environ, start_response)

    def _unavailable_answer(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """503 with the reason the database cannot be opened yet."""
        body = (
            f"no persched database yet ({self._why}); a scheduler makes it when it starts, or run `persched migrate`\n"
        ).encode()
        start_response(
            "503 Service Unavailable",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
                ("Retry-After", "5"),
            ],
        )
        return [body]

    def _opened(self) -> WebApp | None:
        """The dashboard, opened now if it can be (requests that race each try; the first one kept)."""
        with self._lock:
            if self._app is not None:
                return self._app
        try:
            opened = self._open()  # outside the lock: a server that does not answer holds up no other request
        except StoreError as exc:
            self._why = exc
            return None
        with self._lock:
            if self._app is None:
                self._app = opened  # the dashboard from now on: the first one opened
            kept = self._app
        if kept is not opened:
            opened.close()  # another request opened it first
        return kept

    def close(self) -> None:
        """Close the database connections of the dashboard, if it was opened."""
        with self._lock:
            if self._app is not None:
                self._app.close()


def until_the_database_exists(make: Callable[P, WebApp]) -> Callable[P, WebApp | AwaitingDatabase]:
    """Wrap `make` (the dashboard's factory, with its ``allowed_hosts`` keyword): a database it cannot open
    yet gives an `AwaitingDatabase`, which answers the Hosts the dashboard would."""

    @functools.wraps(make)
    def dashboard(*args: P.args, **kwargs: P.kwargs) -> WebApp | AwaitingDatabase:
        try:
            return make(*args, **kwargs)
        except StoreError as exc:
            # make() checked allowed_hosts before it opened the database: these rules are valid.
            hosts = HostRules(None, None, kwargs.get("allowed_hosts", ()), "allowed_hosts=")  # type: ignore[arg-type]
            logger.warning("web: %s; the dashboard answers 503 until the database can be opened", exc)
            return AwaitingDatabase(functools.partial(make, *args, **kwargs), exc, hosts)

    return dashboard
