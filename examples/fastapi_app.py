"""FastAPI with persched in its lifespan: the README's recipe, runnable (needs ``persched[examples]``).

The scheduler is made when the lifespan starts, in the process that serves
(``uvicorn --workers N`` gives one per worker process, each made after the
fork; several workers still run each slot once, through the database), and
shut down when the lifespan ends: uvicorn's SIGTERM stops accepting
requests, then the lifespan's ``async with`` exits and waits for the runs in
flight, async ones included, which keep running on the loop meanwhile.

    PERSCHED_DB=sqlite:///jobs.db uvicorn examples.fastapi_app:app

``GET /jobs`` lists this application's jobs.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``fastapi-example``), EXAMPLE_INTERVAL (seconds
between runs of ``refresh``, default 60), EXAMPLE_JOB_SECONDS (how long each
run awaits, default 0), EXAMPLE_LOG (if set, each run appends a ``start``
and an ``end`` line to this file).
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from fastapi import FastAPI, Request

from persched import AsyncJobScheduler, JobSpec, current_run

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "fastapi-example")
INTERVAL: Final = float(os.environ.get("EXAMPLE_INTERVAL", "60"))
JOB_SECONDS: Final = float(os.environ.get("EXAMPLE_JOB_SECONDS", "0"))
LOG: Final = os.environ.get("EXAMPLE_LOG")


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


JOBS: Final = [JobSpec("fastapi.refresh", refresh, INTERVAL)]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Own the scheduler for the application's lifetime, in the serving process."""
    db = os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db")
    async with AsyncJobScheduler(db, namespace=NAMESPACE) as sched:
        await sched.declare(JOBS, prune=True)
        app.state.scheduler = sched
        yield
    # Here every run this process claimed has finished and been recorded.


app = FastAPI(lifespan=lifespan)


@app.get("/jobs")
async def jobs(request: Request) -> list[dict[str, Any]]:
    """This application's jobs (its namespace only)."""
    sched: AsyncJobScheduler = request.app.state.scheduler
    return [job.model_dump(mode="json") for job in await sched.jobs()]
