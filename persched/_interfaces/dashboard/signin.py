"""Signing in with the access token (``persched web``): the form (``/login``), the sign-in and the sign-out.

A loopback name every local service shares is refused for the sign-in (cookies ignore ports), and
the redirect never comes from the request (docs/explanation/interfaces.md, "Signing in").
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from ... import _loggers
from ..http.hosts import LOOPBACK_NAMES, OWN_NAME, split_host
from .auth import DEVICE_SECONDS, same_secret
from .layout import e
from .request import COOKIE, DEVICE_COOKIE, Response, cookie

if TYPE_CHECKING:
    from .actions import Refuse
    from .auth import Access
    from .layout import Frame
    from .request import Request

__all__ = ["SHARED_NAME_WHY", "SignIn"]

SHARED_NAME_WHY: Final = (
    "a session cookie set under 127.0.0.1 or localhost would reach every service on this machine,"
    " whatever its port, and any of them could replay it"
)

logger = logging.getLogger(_loggers.WEB)


class SignIn:
    """The sign-in pages of one dashboard (`access` says whether it has a token to sign in with)."""

    def __init__(self, access: Access, frame: Frame, refuse: Refuse) -> None:
        self._access = access
        self._frame = frame
        self._refuse = refuse

    def form(self, request: Request, problem: str | None, status: HTTPStatus = HTTPStatus.OK) -> Response:
        """``GET /login``: the sign-in form (with `problem` said above it), or the sign-out button."""
        if self._access.authorize is not None:
            return self._frame.error(request, HTTPStatus.NOT_FOUND, "Sign in through the application.")
        if self._access.token is None:
            body = "<h1>Read-only</h1><p>This dashboard was started without an access token, so it has no actions.</p>"
        elif request.actor is not None:
            body = (
                f'<h1>Signed in</h1><form method="post" action="{e(request.url("/logout"))}">'
                '<button id="btn-logout">Sign out</button></form>'
            )
        elif (own := self._own_url(request)) is not None:
            body = (
                f'<h1>Sign in</h1><p class="note" id="own-name">Sign in at <a href="{e(own)}">{e(own)}</a>:'
                f" {e(SHARED_NAME_WHY)}</p>"
            )
        else:
            note = f'<p class="note">{e(problem)}</p>' if problem else ""
            body = (
                f'<h1>Sign in</h1>{note}<form method="post" action="{e(request.url("/login"))}">'
                '<label>Access token <input type="password" name="token" id="token" autocomplete="off"></label> '
                '<button type="submit" id="btn-login">Sign in</button></form>'
            )
        response = self._frame.page(request, "Sign in", body)
        return Response(status, response.body, response.headers)

    def sign_in(self, request: Request, form: dict[str, str]) -> Response:
        """``POST /login``: a session for the right token, within the limit of failed sign-ins."""
        if self._access.authorize is not None:
            return self._frame.error(request, HTTPStatus.NOT_FOUND, "Sign in through the application.")
        if self._access.token is None:
            return self._refuse(request, "this dashboard was started without an access token: it is read-only")
        own = self._own_url(request)
        if own is not None:
            return self._refuse(request, f"sign in at {own}: {SHARED_NAME_WHY}")
        assert self._access.devices is not None  # made with the token
        device = self._access.devices.check(request.device)
        client, trusted = (request.client, False) if device is None else (f"device:{device}", True)
        wait = self._access.sign_ins.retry_after(client, trusted=trusted)
        if wait is not None:
            self._refuse.log.refused(
                "sign-in limited",
                logging.WARNING,
                "web: sign-in refused from %s: too many failed sign-ins",
                request.client,
            )
            seconds_left = max(1, math.ceil(wait))
            page = self.form(
                request, f"Too many failed sign-ins: try again in {seconds_left} s.", HTTPStatus.TOO_MANY_REQUESTS
            )
            return Response(page.status, page.body, (("Retry-After", str(seconds_left)),))
        if not same_secret(form.get("token", ""), self._access.token):
            self._access.sign_ins.failed(client, trusted=trusted)
            self._refuse.log.refused(
                "sign-in", logging.WARNING, "web: sign-in refused (wrong token) from %s", request.client
            )
            return self.form(request, "That is not the access token.", HTTPStatus.FORBIDDEN)
        value = self._access.sessions.create(request.host)
        logger.info("web: signed in from %s", request.client)
        session_cookie = cookie(request, COOKIE, value, round(self._access.sessions.lifetime))
        # A trusted browser keeps its device cookie (its count of failures with it); a new one gets one.
        device_value = request.device if device is not None and request.device else self._access.devices.issue()
        device_cookie = cookie(request, DEVICE_COOKIE, device_value, round(DEVICE_SECONDS))
        # Always this dashboard's own jobs page: no redirect target is ever taken from the request.
        headers = (("Location", request.url("/")), ("Set-Cookie", session_cookie), ("Set-Cookie", device_cookie))
        return Response(HTTPStatus.SEE_OTHER, "", headers)

    @staticmethod
    def _own_url(request: Request) -> str | None:
        """Where to sign in instead when `request` came under a name every local service shares; else None."""
        split = split_host(request.host)
        if split is None or split[0] not in LOOPBACK_NAMES:
            return None
        port = f":{split[1]}" if split[1] else ""
        return f"http://{OWN_NAME}{port}{request.url('/login')}"

    def sign_out(self, request: Request) -> Response:
        """``POST /logout``: end the session (a copied cookie stops working too)."""
        if request.cookie is not None and self._access.sessions.revoke(request.cookie):
            logger.info("web: signed out from %s", request.client)
        headers = (("Location", request.url("/")), ("Set-Cookie", cookie(request, COOKIE, "", 0)))
        return Response(HTTPStatus.SEE_OTHER, "", headers)
