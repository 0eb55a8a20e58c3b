"""Starlette with persched's lifespan inside a lifespan of its own (needs ``persched[examples]``).

The application's lifespan makes what its job needs on the application's
loop (an `asyncio.Event`, standing for a connection pool or an HTTP
client), then enters `persched.integrations.asgi.lifespan`: an
`AsyncJobScheduler` in the serving process, the jobs declared with prune,
shut down when the application stops, after the runs in flight finished.
The async job runs on the application's event loop, so it may use what was
made there.

    PERSCHED_DB=sqlite:///jobs.db uvicorn examples.starlette_app:app

``GET /jobs`` lists this application's jobs; ``GET /refreshed`` says how
many runs this process made.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``starlette-example``), EXAMPLE_INTERVAL
(seconds between runs of ``refresh``, default 60).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Final, TypedDict

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from persched import AsyncJobScheduler, JobSpec
from persched.integrations import asgi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "starlette-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))


class State(TypedDict):
    """What the lifespan hands to every request (``request.state``)."""

    persched: AsyncJobScheduler
    refreshed: asyncio.Event


# What the lifespan made on the application's loop, for the job; set in the serving process.
_loop: asyncio.AbstractEventLoop | None = None
_refreshed: asyncio.Event | None = None
_runs = 0


async def refresh() -> None:
    """The periodic job: an async def on the application's loop, using what the lifespan made on that loop."""
    global _runs
    if _refreshed is None or asyncio.get_running_loop() is not _loop:
        raise RuntimeError("refresh runs on the application's loop, while its lifespan runs")
    _runs += 1
    _refreshed.set()


JOBS = [JobSpec("starlette.refresh", refresh, INTERVAL)]


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[State]:
    """Own the scheduler (and the job's loop-bound resources) for the application's lifetime."""
    global _loop, _refreshed
    _loop, _refreshed = asyncio.get_running_loop(), asyncio.Event()
    persched = asgi.lifespan(
        os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db"), jobs=lambda: JOBS, namespace=NAMESPACE
    )
    try:
        async with persched(app) as state:
            yield {"persched": state["persched"], "refreshed": _refreshed}
    finally:
        _loop, _refreshed = None, None  # after the scheduler shut down: no run can still be using them


async def jobs(request: Request) -> JSONResponse:
    """This application's jobs (its namespace only)."""
    sched: AsyncJobScheduler = request.state.persched
    return JSONResponse([job.model_dump(mode="json") for job in await sched.jobs()])


async def refreshed(request: Request) -> JSONResponse:
    """How many runs of the job this process made, once at least one did (waits up to 5 s)."""
    event: asyncio.Event = request.state.refreshed
    with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError itself from Python 3.11
        await asyncio.wait_for(event.wait(), 5.0)
    return JSONResponse({"runs": _runs})


app = Starlette(routes=[Route("/jobs", jobs), Route("/refreshed", refreshed)], lifespan=lifespan)
