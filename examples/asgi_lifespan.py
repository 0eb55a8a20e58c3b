"""An ASGI application (FastAPI, Starlette and uvicorn's model) that runs persched in its lifespan.

The scheduler is made at lifespan start-up, in the process that serves (so
``uvicorn --workers N`` gives one per worker process, each made after the
fork), declares the application's jobs with prune, and is shut down at
lifespan shutdown, letting in-flight runs finish. Its async job runs on the
application's own event loop. With FastAPI the same code is::

    @asynccontextmanager
    async def lifespan(app):
        async with AsyncJobScheduler(DB, namespace=NAMESPACE) as sched:
            await sched.declare(JOBS, prune=True)
            app.state.scheduler = sched
            yield

    app = FastAPI(lifespan=lifespan)

Serve it with ``uvicorn examples.asgi_lifespan:app``. ``GET /jobs`` lists
this application's jobs as JSON.

Settings (environment): PERSCHED_DB (default ``sqlite:///example-jobs.db``),
EXAMPLE_NAMESPACE (default ``asgi-example``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Final

from persched import AsyncJobScheduler, JobSpec, current_run

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    Scope = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
    Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

NAMESPACE: Final = os.environ.get("EXAMPLE_NAMESPACE", "asgi-example")
REFRESHED: list[str] = []  # slots refreshed in this process (what a real job would cache)


async def refresh() -> None:
    """The periodic job, an async def: it runs on the application's event loop."""
    run = current_run()
    if run is not None:
        REFRESHED.append(run.scheduled_for.isoformat())


JOBS: Final = [JobSpec("refresh", refresh, 60.0)]


class App:
    """The ASGI application: a lifespan that owns the scheduler, and one route."""

    def __init__(self) -> None:
        self.scheduler: AsyncJobScheduler | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Here, not at import: after the server's fork, in the serving process.
                sched = AsyncJobScheduler(
                    os.environ.get("PERSCHED_DB", "sqlite:///example-jobs.db"), namespace=NAMESPACE
                )
                await sched.start()
                await sched.declare(JOBS, prune=True)
                self.scheduler = sched
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.scheduler is not None:
                    await self.scheduler.shutdown(wait=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/jobs" and self.scheduler is not None:
            jobs = [job.model_dump(mode="json") for job in await self.scheduler.jobs()]
            status, body = 200, json.dumps(jobs).encode()
        else:
            status, body = 404, b"[]"
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})


app = App()
