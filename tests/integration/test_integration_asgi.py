"""persched.integrations.asgi with real Starlette and FastAPI (their TestClient runs the lifespan on its loop).

The lifespan starts the scheduler, declares the jobs, exposes it on
``request.state`` and ``app.state`` and shuts it down; the dashboard is an
ASGI app mounted without adapters, whose ``authorize`` sees the ASGI scope;
before its database exists it answers 503. FastAPI under a real uvicorn
process: tests/integration/test_frameworks.py and test_dashboard_frameworks.py.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import AsyncJobScheduler, JobSpec
from tests.support.frameworks import require
from tests.support.helpers import sql, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.requests import Request

JOB: Final = "asgi.record"
SPECS: Final = [JobSpec(JOB, "tests.support.jobs:record", 0.2, args=("a",), start_in=0)]

CLIENT_HOST = "testserver"  # the Host that Starlette's TestClient sends


def _persched_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("persched-")}


def _ok_runs(db: str) -> int:
    return len(sql(db, "SELECT 1 FROM persched_runs WHERE job_id = ? AND outcome = 'ok'", (JOB,)))


def test_the_lifespan_runs_the_jobs_exposes_the_scheduler_and_shuts_it_down(tmp_path: Path) -> None:
    require("starlette", "httpx")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from persched.integrations import asgi

    db = f"sqlite:///{tmp_path / 'asgi.db'}"

    async def jobs(request: Request) -> JSONResponse:
        sched: AsyncJobScheduler = request.state.persched
        assert request.app.state.persched is sched
        return JSONResponse({"namespace": sched.namespace, "jobs": [j.job_id for j in await sched.jobs()]})

    app = Starlette(routes=[Route("/jobs", jobs)], lifespan=asgi.lifespan(db, jobs=SPECS, namespace="asgi", workers=2))
    before = _persched_threads()
    with TestClient(app) as client:
        assert client.get("/jobs").json() == {"namespace": "asgi", "jobs": [JOB]}
        wait_until(lambda: _ok_runs(db) >= 2, message="two runs")
    assert _persched_threads() <= before  # shut down with the lifespan
    assert {row[0] for row in sql(db, "SELECT outcome FROM persched_runs")} == {"ok"}  # none left open


def test_fastapi_takes_the_lifespan_and_the_mounted_dashboard(tmp_path: Path) -> None:
    require("fastapi", "httpx")
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from persched.integrations import asgi

    db = f"sqlite:///{tmp_path / 'fastapi.db'}"
    seen: list[Any] = []

    def may_act(environ: dict[str, Any]) -> str | None:
        seen.append(environ["asgi.scope"]["root_path"])  # the ASGI scope travels with the environ
        return "ops" if environ.get("HTTP_X_USER") == "ops" else None

    app = FastAPI(lifespan=asgi.lifespan(db, jobs=SPECS))
    app.mount(
        "/persched",
        asgi.dashboard(db, authorize=may_act, secret=b"a secret of the tested app", allowed_hosts=[CLIENT_HOST]),
    )

    with TestClient(app) as client:
        sched = app.state.persched
        assert isinstance(sched, AsyncJobScheduler)
        assert [job.job_id for job in client.portal.call(sched.jobs)] == [JOB]
        page = client.get("/persched/")
        assert page.status_code == 200
        assert f'href="/persched/job?id={JOB}"' in page.text  # links under the mount's prefix
        assert "btn-pause" not in client.get(f"/persched/job?id={JOB}").text
        job = client.get(f"/persched/job?id={JOB}", headers={"X-User": "ops"}).text
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', job)
        assert token is not None, job
        answer = client.post(
            "/persched/action",
            data={"id": JOB, "action": "pause", "csrf": token[1]},
            headers={"X-User": "ops", "Origin": "http://testserver"},
            follow_redirects=False,
        )
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == f"/persched/job?id={JOB}&msg=paused"
        assert client.post("/persched/action", content=b"x" * (2 << 20)).status_code == 413
    assert sql(db, "SELECT paused FROM persched_jobs WHERE job_id = ?", (JOB,)) == [(1,)]
    assert set(seen) == {"/persched"}


def test_the_mounted_dashboard_answers_503_until_the_database_exists(tmp_path: Path) -> None:
    require("starlette", "httpx")
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from persched.integrations import asgi

    path = tmp_path / "later.db"
    db = f"sqlite:///{path}"
    app = Starlette(routes=[Mount("/persched", asgi.dashboard(db, allowed_hosts=[CLIENT_HOST]))])
    client = TestClient(app)  # no lifespan: nothing makes the database
    answer = client.get("/persched/")
    assert answer.status_code == 503
    assert "no persched database yet" in answer.text
    assert not path.exists()
    with TestClient(Starlette(lifespan=asgi.lifespan(db, jobs=SPECS))):
        pass  # a scheduler made it
    assert client.get("/persched/").status_code == 200


@pytest.mark.parametrize("scope_type", ["websocket"])
def test_the_dashboard_refuses_what_is_not_http(scope_type: str) -> None:
    import asyncio

    from persched.integrations import asgi

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:  # noqa: ANN401 - an ASGI message
        raise AssertionError(message)

    with pytest.raises(ValueError, match="serves HTTP"):
        asyncio.run(asgi.dashboard("sqlite:///never.db")({"type": scope_type}, receive, send))
