"""FastAPI with persched's ASGI integration: the jobs in the lifespan, the dashboard behind the app's sign-in.

`persched.integrations.asgi.lifespan` makes the scheduler when the lifespan
starts, in the process that serves (``uvicorn --workers N`` gives one per
worker process; several workers still run each slot once, through the
database), and shuts it down when the lifespan ends: uvicorn's SIGTERM stops
accepting requests, then the lifespan exits and waits for the runs in
flight, async ones included, which keep running on the loop meanwhile.
`asgi.dashboard` is the dashboard as an ASGI app, mounted at ``/persched``.

    PERSCHED_DB=sqlite:///jobs.db uvicorn examples.fastapi_app:app

``GET /jobs`` lists this application's jobs; ``POST /login`` signs a user in.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``fastapi-example``), EXAMPLE_INTERVAL (seconds
between runs of ``refresh``, default 60), EXAMPLE_JOB_SECONDS (how long each
run awaits, default 0), EXAMPLE_LOG (if set, each run appends a ``start``
and an ``end`` line to this file), EXAMPLE_SECRET (keys the app's session
cookies and the dashboard's forms).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
import urllib.parse
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any, Final

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse

from persched import JobSpec, current_run
from persched.integrations import asgi

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

    from persched import AsyncJobScheduler

DB: Final = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "fastapi-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
JOB_SECONDS: Final = float(os.environ.get("EXAMPLE_JOB_SECONDS", "0"))
LOG: Final = os.environ.get("EXAMPLE_LOG")
SECRET: Final = os.environ.get("EXAMPLE_SECRET", "example-only-not-a-secret").encode()
USERS: Final = {"alice": "operator", "bob": "viewer"}  # stands for the app's own users and roles
COOKIE: Final = "app_session"


def _log(event: str) -> None:
    run = current_run()
    if LOG and run is not None:
        line = f"{event}\t{run.scheduled_for.isoformat()}\t{time.time():.6f}\t{os.getpid()}\n"
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: a reader never sees half a line
        finally:
            os.close(fd)


async def refresh() -> None:
    """The periodic job, an async def: it runs on the application's event loop (what uvicorn serves on)."""
    _log("start")
    await asyncio.sleep(JOB_SECONDS)  # stands for awaiting the application's own clients
    _log("end")


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
    """Operators may act in the dashboard; everyone else may only read."""
    user = user_of(environ.get("HTTP_COOKIE"))
    return user if user is not None and USERS[user] == "operator" else None


app = FastAPI(lifespan=asgi.lifespan(DB, jobs=[JobSpec("fastapi.refresh", refresh, INTERVAL)], namespace=NAMESPACE))
app.mount("/persched", asgi.dashboard(DB, namespace=NAMESPACE, authorize=may_act, secret=SECRET))


@app.get("/")
def home() -> dict[str, str]:
    return {"app": "the app's own pages"}


@app.post("/login")
async def login(request: Request) -> RedirectResponse:
    """Stands for the app's real sign-in: a signed cookie naming the user."""
    user = urllib.parse.parse_qs((await request.body()).decode()).get("user", [""])[0]
    response = RedirectResponse("/persched/", status_code=303)
    if user in USERS:
        response.set_cookie(COOKIE, f"{user}.{_sign(user)}", httponly=True, samesite="strict")
    return response


@app.get("/jobs")
async def jobs(request: Request) -> list[dict[str, Any]]:
    """This application's jobs (its namespace only)."""
    sched: AsyncJobScheduler = request.state.persched
    return [job.model_dump(mode="json") for job in await sched.jobs()]
