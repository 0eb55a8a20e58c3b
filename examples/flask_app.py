"""Flask's app factory with persched, safe under any pre-fork server (needs ``persched[examples]``).

`create_app()` starts nothing: it may run in gunicorn's master before the
fork (``--preload``), in Flask's reloader parent, or in a ``flask`` CLI
command that serves nothing. A ``before_request`` hook makes the process's
scheduler on the first request that process serves, so it always belongs
to the process that uses it (`examples.wsgi_factory.SchedulerHolder`, which
makes a new one in a forked child). Several workers each start one and
still run each slot once, through the database. At exit persched shuts it
down gracefully (in-flight runs get up to 10 s).

    PERSCHED_DB=sqlite:///jobs.db gunicorn -w 4 'examples.flask_app:create_app()'   # with or without --preload
    PERSCHED_DB=sqlite:///jobs.db flask --app examples.flask_app run --debug          # the reloader too

``GET /jobs`` lists this application's jobs.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``flask-example``), EXAMPLE_INTERVAL (seconds
between runs of ``sync``, default 60).
"""

from __future__ import annotations

import os
from typing import Any, Final

from flask import Flask

from examples.wsgi_factory import SchedulerHolder
from persched import JobSpec, current_run

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "flask-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
SYNCED: list[str] = []  # slots synced in this process (what a real job would write somewhere)


def sync() -> None:
    """The periodic job, a plain function: it runs on a persched worker thread."""
    run = current_run()
    if run is not None:
        SYNCED.append(run.scheduled_for.isoformat())


JOBS: Final = [JobSpec("flask.sync", sync, INTERVAL)]


def holder(app: Flask) -> SchedulerHolder:
    """The app's per-process scheduler holder (kept in ``app.extensions``, as Flask extensions do)."""
    found: SchedulerHolder = app.extensions["persched"]
    return found


def create_app() -> Flask:
    """The app factory: routes and the start-on-first-request hook; no scheduler yet."""
    app = Flask(__name__)
    app.extensions["persched"] = SchedulerHolder(JOBS, NAMESPACE)

    @app.before_request
    def start_scheduler() -> None:
        # Returns None: a before_request function that returns a value replaces the response.
        holder(app).get()

    @app.get("/jobs")
    def jobs() -> list[dict[str, Any]]:
        return [job.model_dump(mode="json") for job in holder(app).get().jobs()]

    return app
