"""persched in an ASGI application (FastAPI, Starlette): a `lifespan` that runs the jobs, and the `dashboard`.

::

    from fastapi import FastAPI
    from persched import JobSpec
    from persched.integrations import asgi

    app = FastAPI(lifespan=asgi.lifespan("sqlite:///jobs.db", jobs=[JobSpec("sync", "myapp.tasks:sync", 60.0)]))
    app.mount("/persched", asgi.dashboard("sqlite:///jobs.db", authorize=who_may_act))

The lifespan runs in each process that serves, so nothing starts at import. Only the standard
library is imported here: the framework is the application's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import sys
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final

from .. import web
from .._interfaces.async_front import AsyncJobScheduler
from .._model.models import DEFAULT_NAMESPACE
from ._dashboard import ProcessDashboard, whole_response
from ._process import job_set

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence

    from _typeshed.wsgi import WSGIApplication

    from .._model.declare import JobSpec

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]

__all__ = ["Dashboard", "dashboard", "lifespan"]

MAX_BODY_BYTES: Final = 1 << 20  # the dashboard's forms are a few hundred bytes; a larger body is refused (413)


def lifespan(
    url: str,
    *,
    jobs: Sequence[JobSpec] | Callable[[], Sequence[JobSpec]] = (),
    namespace: str = DEFAULT_NAMESPACE,
    **options: Any,  # noqa: ANN401 - AsyncJobScheduler's keywords
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[dict[str, Any]]]:
    """Return a lifespan (``FastAPI(lifespan=...)``, ``Starlette(lifespan=...)``) that runs `jobs` while the app serves.

    At start-up it starts a `persched.AsyncJobScheduler` on `url` and declares `jobs` with prune;
    requests find it as ``request.state.persched`` and ``app.state.persched``. At shutdown it shuts
    it down, waiting for the runs in flight. To combine it with a lifespan of your own, enter it
    there: ``async with persched_lifespan(app) as state: yield state``.

    Args:
        url: The database (a SQLAlchemy URL or a SQLite file path); made and migrated if needed.
        jobs: The application's whole set of jobs, or a callable that returns it; empty: declares nothing.
        namespace: The namespace of the application's jobs.
        **options: Passed to `persched.AsyncJobScheduler` (``workers=``, ``jobs_on_loop=``, ...).
    """

    @contextlib.asynccontextmanager
    async def persched_lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:  # noqa: ANN401 - any ASGI framework's app
        async with AsyncJobScheduler(url, namespace=namespace, **options) as sched:
            specs = job_set(jobs)
            if specs:
                await sched.declare(specs, prune=True)
            state = getattr(app, "state", None)
            if state is not None:
                state.persched = sched
            yield {"persched": sched}  # Starlette copies the lifespan's state into each request.state

    return persched_lifespan


def dashboard(url: str, **keywords: Any) -> Dashboard:  # noqa: ANN401 - persched.web.dashboard's keywords
    """Return the dashboard (`persched.web.dashboard`, same keywords) as an ASGI application to mount.

    ``app.mount("/persched", dashboard(url, authorize=..., secret=...))``. `authorize` gets the
    request's WSGI environ, whose ``environ["asgi.scope"]`` is the ASGI scope (``scope["session"]``,
    ``scope["user"]``). The database is opened on the first request, in the process that serves it.
    """
    return Dashboard(ProcessDashboard(functools.partial(web.dashboard, url, **keywords)))


class Dashboard:
    """An ASGI application that answers each HTTP request with the WSGI dashboard, run on a thread.

    The pages are small and read in short transactions, so each request runs whole on a thread.
    """

    def __init__(self, wsgi: WSGIApplication) -> None:
        self._wsgi = wsgi

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ASGI connection (``http``; a ``lifespan`` scope, when served alone, is acknowledged)."""
        if scope["type"] == "lifespan":
            await _acknowledge_lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise ValueError(f"the persched dashboard serves HTTP, not {scope['type']!r}")
        body = await _read_body(receive)
        if body is None:
            await _send(send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, [(b"content-type", b"text/plain")], b"too large\n")
            return
        status, headers, content = await asyncio.to_thread(self._answer, _environ(scope, body))
        await _send(send, status, headers, content)

    def _answer(self, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        status, headers, content = whole_response(self._wsgi, environ)
        return status, [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers], content


async def _acknowledge_lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes | None:
    """Return the request's body, or None past `MAX_BODY_BYTES`."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def _environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """Return the WSGI environ (PEP 3333) of an ASGI HTTP request; ``root_path`` is ``SCRIPT_NAME``."""
    root, path = scope.get("root_path", ""), scope["path"]
    if root and path.startswith(root):
        path = path[len(root) :]  # Starlette keeps the whole path and names the mount's prefix root_path
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode("utf-8").decode("latin-1"),
        "PATH_INFO": path.encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": str(client[0]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "asgi.scope": scope,
    }
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), raw_value.decode("latin-1")
        key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ
