"""The framework recipes, driven through the ASGI and WSGI protocols directly (no framework needed)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import TYPE_CHECKING, Any

import pytest

from examples import asgi_lifespan, wsgi_factory
from persched.errors import SchedulerStateError
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'recipes.db'}"
    monkeypatch.setenv("PERSCHED_DB", url)
    return url


def test_the_asgi_lifespan_owns_the_scheduler_and_async_jobs_run_on_the_apps_loop(db: str) -> None:
    app = asgi_lifespan.App()
    asgi_lifespan.REFRESHED.clear()

    async def scenario() -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def receive() -> dict[str, Any]:
            return await inbox.get()

        async def send(message: Any) -> None:  # noqa: ANN401 - an ASGI message
            await outbox.put(dict(message))

        lifespan = asyncio.create_task(app({"type": "lifespan"}, receive, send))
        await inbox.put({"type": "lifespan.startup"})
        assert (await asyncio.wait_for(outbox.get(), TIMEOUT))["type"] == "lifespan.startup.complete"

        http: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def http_send(message: Any) -> None:  # noqa: ANN401 - an ASGI message
            await http.put(dict(message))

        await app({"type": "http", "path": "/jobs"}, receive, http_send)
        start, body = http.get_nowait(), http.get_nowait()
        assert start["status"] == 200
        (job,) = json.loads(body["body"])
        assert (job["job_id"], job["namespace"], job["declared"]) == ("refresh", "asgi-example", True)

        sched = app.scheduler
        assert sched is not None
        assert await sched.run_now("refresh")
        assert await sched.wait_idle(TIMEOUT)
        assert len(asgi_lifespan.REFRESHED) == 1  # ran, on this loop (the job appends in its own process)

        await inbox.put({"type": "lifespan.shutdown"})
        assert (await asyncio.wait_for(outbox.get(), TIMEOUT))["type"] == "lifespan.shutdown.complete"
        await asyncio.wait_for(lifespan, TIMEOUT)
        with pytest.raises(SchedulerStateError):
            await sched.jobs()

    asyncio.run(asyncio.wait_for(scenario(), 3 * TIMEOUT))


def _get(app: wsgi_factory.Application, path: str) -> tuple[str, bytes]:
    status: list[str] = []
    body = b"".join(app({"PATH_INFO": path}, lambda s, headers: status.append(s)))
    return status[0], body


def test_the_wsgi_factory_starts_nothing_until_a_process_serves(db: str) -> None:
    before = {t.name for t in threading.enumerate()}
    app = wsgi_factory.create_app()
    assert {t.name for t in threading.enumerate()} == before  # safe before a fork (gunicorn --preload)
    try:
        status, body = _get(app, "/jobs")
        assert status == "200 OK"
        assert [j["job_id"] for j in json.loads(body)] == ["cleanup"]
    finally:
        app.holder.get().shutdown(wait=True, timeout=TIMEOUT)


@pytest.mark.slow
def test_a_forked_worker_makes_its_own_scheduler(db: str) -> None:
    app = wsgi_factory.create_app()
    parent = app.holder.get()  # made before the fork, as a careless --preload setup would
    try:
        pid = os.fork()
        if pid == 0:  # the worker: the inherited scheduler is the parent's; the holder makes a new one
            code = 1
            try:
                status, body = _get(app, "/jobs")
                ok = status == "200 OK" and [j["job_id"] for j in json.loads(body)] == ["cleanup"]
                child = app.holder.get()
                ok = ok and child is not parent
                child.shutdown(wait=True, timeout=TIMEOUT)
                code = 0 if ok else 1
            finally:
                os._exit(code)
        _, wait_status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(wait_status) == 0
        assert [j.job_id for j in parent.jobs()] == ["cleanup"]  # the parent carries on untouched
    finally:
        parent.shutdown(wait=True, timeout=TIMEOUT)
