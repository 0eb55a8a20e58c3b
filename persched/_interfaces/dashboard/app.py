"""The dashboard as a WSGI application: `WebApp` tells who acts, routes, and sets the headers.

Threads: the server's worker threads run it; the store's engine gives each its own connection. The
namespaces' caches and the sessions have locks of their own; nothing else is shared between requests.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import TYPE_CHECKING

from ... import _loggers, _realtime
from ...clock import SystemClock
from ...errors import PerschedError, StoreError
from ..http.hosts import HostCheck
from ..http.refusals import RefusalLog
from .actions import Actions, Refuse
from .auth import SESSION_SECONDS, Access
from .layout import Frame
from .namespaces import Namespaces
from .pages import Pages
from .request import BadRequest, cross_site, query_of, read_form, request_of
from .signin import SignIn

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from ..._store import Store
    from ..http.hosts import HostRules
    from .auth import Authorize
    from .request import Request, Response

__all__ = ["WebApp"]

logger = logging.getLogger(_loggers.WEB)


class WebApp:
    """The dashboard as a WSGI application over one database.

    Args:
        store: Opened with `persched._interfaces.existing.open_existing` (never migrated); its
            namespace is the one the pages show unless they ask for another.
        token: The access token that enables the buttons after a sign-in (``persched web``); None:
            read-only, unless `authorize`.
        now: The wall clock (microseconds), for "in 3m" and for the actions' `now`.
        authorize: An application's hook: called with each request's WSGI environ, it returns who acts
            (logged with each action) or None (that request may only read). Not with `token`.
        secret: Keys the CSRF tokens of forms. Default: random per process; an application served by
            several processes passes its own, the same in each.
        hosts: Check each request's ``Host`` against these rules first (a dashboard mounted in an
            application, `persched.web.dashboard`); None: the server checks it (``persched web``).
        namespaces: The only namespaces it serves (with the store's first); None: every one.
        monotonic: The clock of session expiry, the sign-in limit and the log of refusals (seconds);
            tests pass their own.

    Raises:
        PerschedError: Both `token` and `authorize` given.
    """

    def __init__(
        self,
        store: Store,
        token: str | None = None,
        now: Callable[[], int] | None = None,
        *,
        authorize: Authorize | None = None,
        secret: bytes | None = None,
        hosts: HostRules | None = None,
        namespaces: Collection[str] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        if token is not None and authorize is not None:
            raise PerschedError("WebApp: pass token (its own sign-in) or authorize (the application's), not both")
        self.store = store
        self.namespace = store.namespace
        now = now or SystemClock().now_us
        served = Namespaces(store, namespaces)
        monotonic = monotonic or _realtime.monotonic
        self._access = Access(token, authorize, secret, SESSION_SECONDS, monotonic)
        self._frame = Frame(self._access, store.url)
        self._refuse = Refuse(self._frame, RefusalLog(logger, monotonic))
        self._pages = Pages(served, self._access, self._frame, now)
        self._sign_in = SignIn(self._access, self._frame, self._refuse)
        self._actions = Actions(served, self._access, now, self._refuse)
        self._answer: WSGIApplication = self._respond
        if hosts is not None:
            self._answer = HostCheck(self._respond, hosts, "web", monotonic=monotonic)

    def close(self) -> None:
        """Close the database connections (the dashboard answers no request after it)."""
        self.store.engine.dispose()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request (after the Host check, if it has `hosts`)."""
        return self._answer(environ, start_response)

    def _respond(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = request_of(environ)
        request.actor = self._access.actor(request)
        try:
            response = self._route(request)
        except BadRequest as exc:
            self._refuse.log.refused(
                "bad request",
                logging.INFO,
                "web: %s %s from %s: %s",
                request.method,
                request.path[:200],
                request.client,
                exc,
            )
            response = self._frame.error(request, exc.status, str(exc))
        except StoreError as exc:
            logger.warning("web: %s", exc)
            response = self._frame.error(request, HTTPStatus.SERVICE_UNAVAILABLE, f"The database cannot be read: {exc}")
        body = response.body.encode()
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("X-Frame-Options", "DENY"),  # no clickjacking of the buttons
            ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"),
            ("Referrer-Policy", "same-origin"),
            *response.headers,
        ]
        start_response(f"{response.status.value} {response.status.phrase}", headers)
        return [body]

    def _route(self, request: Request) -> Response:
        """The page or the form that answers `request`."""
        method, path = request.method, request.path
        if method in ("GET", "HEAD"):
            if path == "/":
                return self._pages.jobs(request, query_of(request, {"ns", "all", "after", "msg"}))
            if path == "/job":
                return self._pages.job(request, query_of(request, {"id", "ns", "before", "msg"}))
            if path == "/runs":
                return self._pages.runs(request, query_of(request, {"ns", "all", "outcome", "before"}))
            if path == "/login":
                query_of(request, set())
                return self._sign_in.form(request, None)
            return self._frame.error(request, HTTPStatus.NOT_FOUND, f"No page {path[:200]}")
        if method == "POST":
            why = cross_site(request.environ)
            if why is not None:
                return self._refuse(request, why)
            form = read_form(request.environ)
            if path == "/login":
                return self._sign_in.sign_in(request, form)
            if path == "/logout":
                return self._sign_in.sign_out(request)
            if path == "/action":
                return self._actions.act(request, form)
            return self._frame.error(request, HTTPStatus.NOT_FOUND, f"No form {path[:200]}")
        return self._frame.error(request, HTTPStatus.METHOD_NOT_ALLOWED, f"{method[:20]} is not supported")
