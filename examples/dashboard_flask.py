"""persched's dashboard mounted in a Flask app at ``/persched``, behind the app's own sign-in.

The dashboard is a WSGI application of its own (`persched.web.dashboard`);
werkzeug's ``DispatcherMiddleware`` sends ``/persched/...`` to it and the
rest to Flask. Who may act is the app's decision: the hook reads Flask's
session (a signed cookie) in a request context made from the same environ,
so it is the user the app signed in, or None (read-only).

    PERSCHED_DB=sqlite:///jobs.db flask --app examples.dashboard_flask:create_app run

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``flask-example``), EXAMPLE_SECRET (Flask's
secret key; the dashboard's CSRF tokens are keyed by it too).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from flask import Flask, redirect, request, session
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from persched.web import dashboard

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
    from werkzeug.wrappers import Response

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "flask-example")
USERS: Final = {"alice": "operator", "bob": "viewer"}  # stands for the app's own users and roles


def create_app() -> Flask:
    """The app, with the dashboard mounted at /persched (the database must exist: `persched migrate`)."""
    app = Flask(__name__)
    app.secret_key = os.environ.get("EXAMPLE_SECRET", "example-only-not-a-secret")

    @app.post("/login")
    def login() -> Response:
        # Stands for the app's real sign-in (a password check, SSO): it puts the user in the session.
        user = request.form.get("user", "")
        if user in USERS:
            session["user"] = user
        return redirect("/persched/")

    @app.get("/")
    def home() -> str:
        return "the app's own pages"

    def may_act(environ: WSGIEnvironment) -> str | None:
        """The app's decision: operators may act; everyone else may only read."""
        with app.request_context(environ):
            user = session.get("user")
        return user if USERS.get(user or "") == "operator" else None

    db = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
    jobs = dashboard(db, namespace=NAMESPACE, authorize=may_act, secret=app.secret_key.encode())
    app.extensions["persched-dashboard"] = jobs  # closed by whoever owns the app (the test does)
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/persched": jobs})  # type: ignore[method-assign]  # werkzeug's recipe
    return app
