"""A WSGI application whose worker processes each start a persched scheduler.

This is the deployment that bites APScheduler users most: a scheduler started
at import time inside a web application that the server runs in several worker
processes. With APScheduler every worker runs every job. With persched every
worker's scheduler claims slots through the shared database, so each slot of
``refresh-cache`` runs exactly once, in whichever worker claims it first::

    gunicorn -w 4 examples.wsgi_app:application      # do not use --preload
    python -m examples.serve_prefork --workers 4     # the same model, stdlib only

Do not start the scheduler before the server forks (gunicorn ``--preload``):
threads do not survive ``fork()``. Without preloading, each worker imports
this module after the fork and starts its own scheduler. The identical
``schedule()`` in every worker is a no-op after the first one (same
generation, same next run), so restarts and extra workers never push the
schedule back.

Settings (environment):
    PERSCHED_DB: the database (default ``sqlite:///example-jobs.db``); one
        SQLite file is enough on one machine, PostgreSQL across machines.
    EXAMPLE_INTERVAL: seconds between runs of ``refresh-cache`` (default 60).
    EXAMPLE_LOG: if set, every run appends one line to this file.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

from persched import JobScheduler, current_run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

DB = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
INTERVAL = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
LOG = os.environ.get("EXAMPLE_LOG")


def refresh_cache() -> None:
    """The periodic job: here it only records which worker ran which slot."""
    run = current_run()
    if LOG and run is not None:
        line = f"{run.job_id}\t{run.scheduled_for.isoformat()}\t{os.getpid()}\n"
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: lines of workers never interleave
        finally:
            os.close(fd)


# The two lines of logging set-up. gunicorn and uvicorn configure only their
# own loggers, so without a root handler persched's messages (a job's
# traceback included) reach stderr through Python's last-resort handler: no
# time, no level, no process. This does nothing if logging is set up already.
LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

# Module level: runs once per worker process, after the fork.
scheduler = JobScheduler(DB, workers=2)
scheduler.start()  # persched shuts it down gracefully at interpreter exit
scheduler.schedule("refresh-cache", refresh_cache, INTERVAL)


def application(environ: dict[str, object], start_response: Callable[..., object]) -> Iterable[bytes]:
    """Show the jobs and which process served the request."""
    body = json.dumps(
        {
            "pid": os.getpid(),
            "instance": scheduler.instance_id,
            "jobs": [{"job_id": j.job_id, "next_run_at": j.next_run_at.isoformat()} for j in scheduler.jobs()],
        }
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
