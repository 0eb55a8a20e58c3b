"""A Flask app factory with persched's integration: jobs, the dashboard behind the app's sign-in, ``flask persched``.

`Persched.init_app` starts the process's scheduler when the process serves
(``flask run``'s child, each gunicorn worker, with or without
``--preload``), so the jobs run before any request; processes that serve
nothing (gunicorn's master under ``--preload``, the reloader's parent,
other ``flask`` commands) start none. At exit persched shuts it down.

    PERSCHED_DB=sqlite:///jobs.db gunicorn -w 4 'examples.flask_app:create_app()'   # with or without --preload
    PERSCHED_DB=sqlite:///jobs.db flask --app examples.flask_app run --debug          # the reloader too
    PERSCHED_DB=sqlite:///jobs.db flask --app examples.flask_app persched jobs        # the command line

``GET /jobs`` lists this application's jobs; ``/persched/`` is the dashboard
(operators, signed in by ``POST /login``, may act).

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``flask-example``), EXAMPLE_INTERVAL (seconds
between runs of ``sync``, default 60), EXAMPLE_SECRET (Flask's secret key,
which keys the dashboard's forms too), EXAMPLE_LOG (if set, every run
appends one line to this file).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from flask import Flask, current_app, redirect, request, session

from persched import JobSpec, current_run
from persched.integrations.flask import Persched

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
    from werkzeug.wrappers import Response

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "flask-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
LOG: Final = os.environ.get("EXAMPLE_LOG")
USERS: Final = {"alice": "operator", "bob": "viewer"}  # stands for the app's own users and roles


def sync() -> None:
    """The periodic job, a plain function: it runs on a persched worker thread."""
    run = current_run()
    if LOG and run is not None:
        line = f"{run.job_id}\t{run.scheduled_for.isoformat()}\t{os.getpid()}\n"
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: lines of workers never interleave
        finally:
            os.close(fd)


def may_act(environ: WSGIEnvironment) -> str | None:
    """Who may act in the dashboard: operators (the hook runs in a request context: ``session`` works)."""
    user = session.get("user")
    return user if USERS.get(user or "") == "operator" else None


persched = Persched(
    jobs=[JobSpec("flask.sync", sync, INTERVAL)],
    namespace=NAMESPACE,
    dashboard_path="/persched",
    authorize=may_act,
)


def create_app() -> Flask:
    """The app factory: routes, and persched registered (it starts the jobs where this process serves)."""
    app = Flask(__name__)
    app.secret_key = os.environ.get("EXAMPLE_SECRET", "example-only-not-a-secret")
    app.config["PERSCHED_URL"] = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
    persched.init_app(app)

    @app.get("/")
    def home() -> str:
        return "the app's own pages"

    @app.post("/login")
    def login() -> Response:
        # Stands for the app's real sign-in (a password check, SSO): it puts the user in the session.
        user = request.form.get("user", "")
        if user in USERS:
            session["user"] = user
        return redirect("/persched/")

    @app.get("/jobs")
    def jobs() -> list[dict[str, Any]]:
        return [job.model_dump(mode="json") for job in current_app.extensions["persched"].jobs()]

    return app
