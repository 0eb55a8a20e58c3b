"""persched's dashboard mounted in a FastAPI app at ``/persched``, behind the app's own sign-in.

The dashboard is a WSGI application (`persched.web.dashboard`); a2wsgi's
``WSGIMiddleware`` (Starlette's own is deprecated in its favour) runs it on
a thread pool under the ASGI server. Who may act is the app's decision: the
hook reads the app's session cookie with the same function the app's routes
use (`user_of`), so it is the user the app signed in, or None (read-only).

    PERSCHED_DB=sqlite:///jobs.db uvicorn examples.dashboard_fastapi:app

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``fastapi-example``), EXAMPLE_SECRET (keys the
app's session cookies and the dashboard's CSRF tokens).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import urllib.parse
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Final

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse

from persched.web import dashboard

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "fastapi-example")
SECRET: Final = os.environ.get("EXAMPLE_SECRET", "example-only-not-a-secret").encode()
USERS: Final = {"alice": "operator", "bob": "viewer"}  # stands for the app's own users and roles
COOKIE: Final = "app_session"


def _sign(user: str) -> str:
    return hmac.new(SECRET, user.encode(), hashlib.sha256).hexdigest()


def user_of(cookie_header: str | None) -> str | None:
    """The app's own authentication: the signed-in user of a Cookie header, or None."""
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(cookie_header or "")
    except Exception:  # noqa: BLE001 - a malformed Cookie header is no user
        return None
    value = cookies[COOKIE].value if COOKIE in cookies else ""
    user, _, mac = value.partition(".")
    return user if user in USERS and hmac.compare_digest(mac, _sign(user)) else None


def may_act(environ: WSGIEnvironment) -> str | None:
    """Operators may act; everyone else may only read."""
    user = user_of(environ.get("HTTP_COOKIE"))
    return user if user is not None and USERS[user] == "operator" else None


app = FastAPI()


@app.post("/login")
async def login(request: Request) -> RedirectResponse:
    """Stands for the app's real sign-in: a signed cookie naming the user."""
    user = urllib.parse.parse_qs((await request.body()).decode()).get("user", [""])[0]
    response = RedirectResponse("/persched/", status_code=303)
    if user in USERS:
        response.set_cookie(COOKIE, f"{user}.{_sign(user)}", httponly=True, samesite="strict")
    return response


@app.get("/")
def home() -> dict[str, str]:
    return {"app": "the app's own pages"}


# Opened at import: the database must exist (`persched migrate`); the dashboard never migrates it.
jobs = dashboard(
    os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db"), namespace=NAMESPACE, authorize=may_act, secret=SECRET
)
app.mount("/persched", WSGIMiddleware(jobs))  # type: ignore[arg-type]  # a2wsgi's WSGI app type is its own
