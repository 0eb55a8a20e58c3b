"""aiohttp with persched in a cleanup context (needs ``persched[examples]``).

``app.cleanup_ctx`` takes an async generator: the code before its ``yield``
runs at start-up, the code after it at cleanup, in the serving process, on
the application's loop. The scheduler lives inside one ``async with``
across that ``yield``, so it is shut down at cleanup (after the runs in
flight finished) even when a later start-up step failed. Its async job runs
on the application's loop.

    PERSCHED_DB=sqlite:///jobs.db python -m aiohttp.web -P 8080 examples.aiohttp_app:make_app

``GET /jobs`` lists this application's jobs.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``aiohttp-example``), EXAMPLE_INTERVAL (seconds
between runs of ``refresh``, default 60).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from aiohttp import web

from persched import AsyncJobScheduler, JobSpec, current_run

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "aiohttp-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
SCHEDULER: Final = web.AppKey("scheduler", AsyncJobScheduler)
REFRESHED: list[str] = []  # slots refreshed in this process (what a real job would cache)


async def refresh() -> None:
    """The periodic job, an async def: it runs on the application's event loop."""
    run = current_run()
    if run is not None:
        REFRESHED.append(run.scheduled_for.isoformat())


JOBS: Final = [JobSpec("aiohttp.refresh", refresh, INTERVAL)]


async def persched_ctx(app: web.Application) -> AsyncIterator[None]:
    """Start the scheduler at start-up, shut it down at cleanup (one ``async with`` across the yield)."""
    db = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
    async with AsyncJobScheduler(db, namespace=NAMESPACE) as sched:
        await sched.declare(JOBS, prune=True)
        app[SCHEDULER] = sched
        yield


async def jobs(request: web.Request) -> web.Response:
    """This application's jobs (its namespace only)."""
    sched = request.app[SCHEDULER]
    return web.json_response([job.model_dump(mode="json") for job in await sched.jobs()])


def make_app(argv: list[str] | None = None) -> web.Application:
    """The application factory (``python -m aiohttp.web`` calls it with its extra arguments)."""
    app = web.Application()
    app.cleanup_ctx.append(persched_ctx)
    app.router.add_get("/jobs", jobs)
    return app
