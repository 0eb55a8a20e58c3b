"""A WSGI app factory (Flask's ``create_app`` pattern) that starts persched safely under any pre-fork server.

The factory may run before the server forks (gunicorn ``--preload``) or
after (no preload, Flask's dev server): either way the scheduler is made
lazily, by the first request a process serves, for that process. A
scheduler made before a fork would be unusable in the children (persched
raises SchedulerStateError in a forked child: docs/reference/behaviour.md, "Forks"), so nothing
here starts one at import or in the factory. (Flask, FastAPI, Starlette and
Django have persched's integrations instead, which start the jobs with the
application: docs/frameworks.md.)

Serve it with ``gunicorn 'examples.wsgi_factory:create_app()'`` (with or
without ``--preload``). ``GET /jobs`` lists this application's jobs as JSON.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``wsgi-example``).
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Final

from persched import JobScheduler, JobSpec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "wsgi-example")


def cleanup() -> None:
    """The periodic job (a plain function: it runs on a worker thread)."""


JOBS: Final = [JobSpec("cleanup", cleanup, 3600.0)]


class SchedulerHolder:
    """One started scheduler per process, made on first use in that process (never inherited over a fork)."""

    def __init__(self, jobs: Sequence[JobSpec] = JOBS, namespace: str = NAMESPACE) -> None:
        self.jobs: Final = list(jobs)
        self.namespace: Final = namespace
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._scheduler: JobScheduler | None = None

    def get(self) -> JobScheduler:
        """Return this process's scheduler, making, starting and declaring it on first use."""
        with self._lock:
            if self._scheduler is None or self._pid != os.getpid():
                # A scheduler inherited over a fork belongs to the parent: leave it, make our own.
                sched = JobScheduler(
                    os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db"), namespace=self.namespace
                )
                sched.start()  # persched shuts it down gracefully at interpreter exit
                sched.declare(self.jobs, prune=True)
                self._scheduler, self._pid = sched, os.getpid()
            return self._scheduler


class Application:
    """The WSGI callable; `holder` gives shutdown hooks and tests this process's scheduler."""

    def __init__(self) -> None:
        self.holder = SchedulerHolder()

    def __call__(self, environ: dict[str, object], start_response: Callable[..., object]) -> Iterable[bytes]:
        sched = self.holder.get()
        if environ.get("PATH_INFO") == "/jobs":
            body = json.dumps([job.model_dump(mode="json") for job in sched.jobs()]).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
        else:
            body = b"[]"
            start_response("404 Not Found", [("Content-Type", "application/json")])
        return [body]


def create_app() -> Application:
    """The app factory: return the WSGI callable; start nothing (see the module docstring)."""
    return Application()
