"""The framework recipes with the real frameworks (the ``examples`` extra): FastAPI under a real uvicorn
process, Starlette's TestClient, aiohttp's test server. (Flask: tests/integration/test_integration_flask.py.)

tests/integration/test_recipes.py drives the framework-free versions through
the ASGI and WSGI protocols; these check that the recipes hold with each
framework's own start-up and shutdown machinery. In CI a missing framework
fails these tests (tests/support/frameworks.py); locally they skip.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobSpec
from persched.errors import SchedulerStateError
from tests.multi._cluster import REPO, child_env, throttled
from tests.support.frameworks import require
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from pathlib import Path

INTERVAL: Final = 0.2


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'frameworks.db'}"
    monkeypatch.setenv("PERSCHED_DB", url)
    return url


def _outcomes(db: str, job_id: str) -> list[str | None]:
    return [row[0] for row in sql(db, "SELECT outcome FROM persched_runs WHERE job_id = ? ORDER BY run_id", (job_id,))]


# -- FastAPI, served by a real uvicorn process -------------------------------------------------------------

UVICORN_PORT: Final = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def _log_events(log: Path) -> list[tuple[str, str, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        event, slot, at, _pid = line.split("\t")
        out.append((event, slot, float(at)))
    return out


@pytest.mark.slow
def test_fastapi_under_uvicorn_runs_jobs_on_its_loop_and_sigterm_lets_the_run_in_flight_finish(
    tmp_path: Path,
) -> None:
    require("fastapi", "uvicorn")
    db = f"sqlite:///{tmp_path / 'fastapi.db'}"
    log, server_log = tmp_path / "runs.tsv", tmp_path / "server.log"
    env = child_env()
    # Each run awaits 0.6 s on the loop and the interval is 0.2 s, so the next slot is due when a run
    # ends: a run is in flight at almost every instant, and the one seen in flight stays so for 0.6 s.
    env.update(PERSCHED_DB=db, EXAMPLE_INTERVAL=str(INTERVAL), EXAMPLE_JOB_SECONDS="0.6", EXAMPLE_LOG=str(log))
    command = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--host", "127.0.0.1", "--port", "0"]
    with server_log.open("wb") as out:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            throttled(lambda: UVICORN_PORT.search(server_log.read_text()) is not None or server.poll() is not None),
            timeout=3 * TIMEOUT,
            message="uvicorn listening",
        )
        found = UVICORN_PORT.search(server_log.read_text())
        assert found is not None, server_log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{found[1]}/jobs", timeout=TIMEOUT) as response:
            jobs = json.loads(response.read())
        assert [(j["job_id"], j["namespace"], j["declared"]) for j in jobs] == [
            ("fastapi.refresh", "fastapi-example", True)
        ]

        def in_flight() -> bool:
            events = [event for event, _, _ in _log_events(log)]
            return events.count("end") >= 1 and events.count("start") > events.count("end")

        wait_until(throttled(in_flight, every=0.02), message="a run in flight, after one finished")
        signalled_at = time.time()
        server.send_signal(signal.SIGTERM)
        code = server.wait(3 * TIMEOUT)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(TIMEOUT)
    text = server_log.read_text()
    # Recent uvicorn re-raises the SIGTERM it handled once it has shut down, so it may end by that signal.
    assert code in (0, -signal.SIGTERM), text
    assert "Application shutdown complete" in text, text
    events = _log_events(log)
    starts = {slot: at for event, slot, at in events if event == "start"}
    ends = {slot: at for event, slot, at in events if event == "end"}
    assert starts.keys() == ends.keys()  # every run that started on the loop also finished
    assert any(starts[s] < signalled_at < ends[s] for s in starts)  # one was in flight at SIGTERM, and finished
    outcomes = _outcomes(db, "fastapi.refresh")
    assert outcomes == ["ok"] * len(starts)  # recorded as finished: none open, none lost or failed


# -- Starlette, with its TestClient (the lifespan runs on the client's portal loop) --------------------------


def test_starlette_lifespan_owns_the_scheduler_and_its_job_uses_loop_bound_objects(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("starlette", "httpx")
    from starlette.testclient import TestClient

    from examples import starlette_app

    job = JobSpec("starlette.refresh", starlette_app.refresh, INTERVAL, start_in=0)
    monkeypatch.setattr(starlette_app, "JOBS", [job])
    before = {t.name for t in threading.enumerate()}
    with TestClient(starlette_app.app) as client:  # runs the lifespan's start-up ... shutdown
        jobs = client.get("/jobs").json()
        assert [(j["job_id"], j["namespace"]) for j in jobs] == [("starlette.refresh", "starlette-example")]
        assert client.get("/refreshed").json()["runs"] >= 1  # the job set the loop-bound Event
        wait_until(throttled(lambda: _outcomes(db, "starlette.refresh").count("ok") >= 2), message="two runs")
    assert {t.name for t in threading.enumerate() if t.name.startswith("persched-")} <= before
    outcomes = _outcomes(db, "starlette.refresh")
    assert outcomes == ["ok"] * len(outcomes)  # on the application's loop (the job raises elsewhere), all closed


# -- aiohttp, with its test server (a real server on a free port, cleanup_ctx run by its runner) -----------


def test_aiohttp_cleanup_ctx_starts_the_scheduler_and_shuts_it_down_at_cleanup(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("aiohttp")
    from aiohttp.test_utils import TestClient, TestServer

    from examples import aiohttp_app

    monkeypatch.setattr(aiohttp_app, "JOBS", [JobSpec("aiohttp.refresh", aiohttp_app.refresh, INTERVAL, start_in=0)])
    aiohttp_app.REFRESHED.clear()

    async def scenario() -> None:
        app = aiohttp_app.make_app()
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/jobs")
            assert response.status == 200
            jobs = await response.json()
            assert [(j["job_id"], j["namespace"]) for j in jobs] == [("aiohttp.refresh", "aiohttp-example")]
            sched = app[aiohttp_app.SCHEDULER]
            deadline = time.monotonic() + TIMEOUT
            while len(aiohttp_app.REFRESHED) < 2:  # appended by the job, on this loop
                assert time.monotonic() < deadline, "two runs of aiohttp.refresh"
                await asyncio.sleep(0.01)
        with pytest.raises(SchedulerStateError):  # cleanup shut it down
            await sched.jobs()

    asyncio.run(asyncio.wait_for(scenario(), 3 * TIMEOUT))
    outcomes = _outcomes(db, "aiohttp.refresh")
    assert outcomes.count("ok") >= 2
    assert outcomes == ["ok"] * len(outcomes)  # shutdown waited: no run left open
