"""persched.integrations.flask with real Flask: jobs at the app's start, the dashboard, ``flask persched``, placement.

In this process with Flask's test client and CLI runner; `flask run` with its
reloader as processes (slow). The gunicorn runs are in tests/integration/test_gunicorn.py.
The jobs' runs at the app's start are checked on every engine
(``every_engine``); the mounted dashboard's SQL on every engine is
tests/web/test_mounted.py's, several processes on one database of each
engine tests/multi's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, Final

import pytest
from sqlalchemy.exc import OperationalError

from persched import JobScheduler, JobSpec
from persched.errors import PerschedError, SchedulerStateError
from tests.multi._cluster import REPO, child_env, throttled
from tests.support.frameworks import require
from tests.support.helpers import START_TIMEOUT, TIMEOUT, db_sql, sql, stop_gracefully, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from flask import Flask

    from persched.integrations.flask import Persched

INTERVAL: Final = 0.2
JOB: Final = "flask.sync"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'flask.db'}"


LOST_EXIT: Final = "SystemExit: 0"  # the last line of a SystemExit that Python could only print


def _outcomes(db: str, job_id: str = JOB) -> list[str | None]:
    try:
        rows = db_sql(db, "SELECT outcome FROM persched_runs WHERE job_id = :job ORDER BY run_id", job=job_id)
    except OperationalError:  # no SQLite table yet: a child process is still making the database
        return []
    return [row[0] for row in rows]


def _persched_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("persched-")}


@pytest.fixture
def apps() -> Iterator[list[tuple[Flask, Persched]]]:
    """The (app, extension) pairs a test made; each app's scheduler is shut down at the end."""
    made: list[tuple[Flask, Persched]] = []
    yield made
    for app, ext in made:
        ext.shutdown(app, timeout=TIMEOUT)


def _app(
    db: str,
    apps: list[tuple[Flask, Persched]],
    config: dict[str, Any] | None = None,
    secret: str | None = "a secret of the tested app",
    **keywords: Any,  # noqa: ANN401 - Persched's keywords
) -> Flask:
    require("flask")
    from flask import Flask

    from persched.integrations.flask import Persched

    app = Flask("tested")
    app.secret_key = secret
    app.config.update(config or {})
    ext = Persched(
        url=db, jobs=[JobSpec(JOB, "tests.support.jobs:record", INTERVAL, args=("f",), start_in=0)], **keywords
    )
    apps.append((app, ext))
    ext.init_app(app)
    return app


@pytest.mark.every_engine
def test_init_app_starts_the_jobs_before_any_request(db_url: str, apps: list[tuple[Flask, Persched]]) -> None:
    app = _app(db_url, apps, namespace="flask-tested")
    sched = app.extensions["persched"]
    assert isinstance(sched, JobScheduler)
    assert sched.namespace == "flask-tested"
    wait_until(throttled(lambda: _outcomes(db_url).count("ok") >= 2), message="two runs, no request served")
    assert [j.job_id for j in sched.jobs()] == [JOB]  # declared


def test_an_app_factory_gets_one_scheduler_per_app_and_a_second_init_reuses_none(
    db: str, tmp_path: Path, apps: list[tuple[Flask, Persched]]
) -> None:
    first = _app(db, apps)
    second = _app(f"sqlite:///{tmp_path / 'other.db'}", apps)
    assert first.extensions["persched"] is not second.extensions["persched"]
    wait_until(throttled(lambda: _outcomes(db).count("ok") >= 1), message="a run of the first app")


def test_persched_start_false_starts_nothing_and_says_why(db: str, apps: list[tuple[Flask, Persched]]) -> None:
    before = _persched_threads()
    app = _app(db, apps, config={"PERSCHED_START": False})
    assert "persched" not in app.extensions
    assert _persched_threads() == before
    ext = apps[-1][1]
    with pytest.raises(SchedulerStateError, match="PERSCHED_START"):
        ext.scheduler(app)


def test_bad_configuration_is_a_clear_error(apps: list[tuple[Flask, Persched]]) -> None:
    require("flask")
    from flask import Flask

    from persched.integrations.flask import Persched

    with pytest.raises(PerschedError, match="PERSCHED_URL"):
        Persched(Flask("no-url"))
    with pytest.raises(PerschedError, match="dashboard_path"):
        Persched(url="sqlite:///x.db", dashboard_path="persched")


def test_the_dashboard_is_mounted_behind_the_apps_session(db: str, apps: list[tuple[Flask, Persched]]) -> None:
    from flask import session

    def may_act(environ: object) -> str | None:
        user = session.get("user")  # the hook runs in a Flask request context
        return user if user == "alice" else None

    app = _app(db, apps, dashboard_path="/persched", authorize=may_act)

    @app.post("/login/<user>")
    def login(user: str) -> str:
        session["user"] = user
        return "ok"

    client = app.test_client()
    page = client.get("/persched/")
    assert page.status_code == 200
    assert f'href="/persched/job?id={JOB}"'.encode() in page.data
    assert b"btn-pause" not in client.get(f"/persched/job?id={JOB}").data  # not signed in: read-only
    client.post("/login/bob")
    assert b"btn-pause" not in client.get(f"/persched/job?id={JOB}").data
    client.post("/login/alice")
    job = client.get(f"/persched/job?id={JOB}").data.decode()
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', job)
    assert token is not None, job
    answer = client.post(
        "/persched/action",
        data={"id": JOB, "action": "pause", "csrf": token[1]},
        headers={"Origin": "http://localhost"},
    )
    assert answer.status_code == 303, answer.data
    assert sql(db, "SELECT paused FROM persched_jobs WHERE job_id = ?", (JOB,)) == [(1,)]
    assert client.get("/nowhere").status_code == 404  # the app's own routes are untouched


@pytest.mark.parametrize(
    ("config", "keywords"),
    [({"TRUSTED_HOSTS": ["app.example.com"]}, {}), ({}, {"allowed_hosts": ["app.example.com"]})],
    ids=["TRUSTED_HOSTS", "allowed_hosts"],
)
def test_the_mounted_dashboard_answers_the_apps_host_names_only(
    db: str, apps: list[tuple[Flask, Persched]], config: dict[str, Any], keywords: dict[str, Any]
) -> None:
    app = _app(db, apps, config, dashboard_path="/persched", **keywords)
    client = app.test_client()
    assert client.get("/persched/", base_url="http://app.example.com").status_code == 200
    assert client.get("/persched/", base_url="http://127.0.0.1:5000").status_code == 200
    assert client.get("/persched/", base_url="http://evil.example").status_code == 400  # DNS rebinding


def test_without_host_names_the_mounted_dashboard_answers_loopback_only(
    db: str, apps: list[tuple[Flask, Persched]]
) -> None:
    client = _app(db, apps, dashboard_path="/persched").test_client()
    assert client.get("/persched/", base_url="http://localhost").status_code == 200
    page = client.get("/persched/", base_url="http://app.example.com")
    assert page.status_code == 400
    assert b"app.example.com" in page.data


def test_the_dashboards_forms_are_keyed_by_the_apps_secret_even_when_it_is_set_after_init_app(
    db: str, apps: list[tuple[Flask, Persched]]
) -> None:
    """Two apps stand for two worker processes: a form one renders is accepted by the other."""
    one, two = (_app(db, apps, secret=None, dashboard_path="/persched", authorize=lambda environ: "ops") for _ in "12")
    for app in (one, two):
        app.secret_key = "set after init_app, the same in every process"
    job = one.test_client().get(f"/persched/job?id={JOB}").data.decode()
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', job)
    assert token is not None, job
    answer = two.test_client().post(
        "/persched/action",
        data={"id": JOB, "action": "pause", "csrf": token[1]},
        headers={"Origin": "http://localhost"},
    )
    assert answer.status_code == 303, answer.data
    assert sql(db, "SELECT paused FROM persched_jobs WHERE job_id = ?", (JOB,)) == [(1,)]


def test_flask_persched_is_the_command_line_on_the_apps_database(db: str, apps: list[tuple[Flask, Persched]]) -> None:
    app = _app(db, apps, namespace="flask-cli")
    result = app.test_cli_runner().invoke(args=["persched", "jobs"])
    assert result.exit_code == 0, result.output
    assert JOB in result.output
    result = app.test_cli_runner().invoke(args=["persched", "show", "no-such-job"])
    assert result.exit_code == 1


# -- flask run with its reloader, as processes ---------------------------------------------------------------

STARTED: Final = re.compile(r"persched: jobs of process (\d+): (here|nowhere|forked workers) \((.*)\)")


@pytest.mark.slow
def test_flask_run_with_the_reloader_runs_jobs_in_its_child_only_and_sigterm_to_it_stops_them_cleanly(
    tmp_path: Path,
) -> None:
    require("flask")
    db = f"sqlite:///{tmp_path / 'run.db'}"
    log = tmp_path / "flask.log"
    env = child_env()
    env.pop("WERKZEUG_RUN_MAIN", None)
    env.update(PERSCHED_DB=db, EXAMPLE_INTERVAL=str(INTERVAL), PYTHONUNBUFFERED="1")
    command = [
        sys.executable,
        "-m",
        "flask",
        "--app",
        "tests.support.flask_logged:app",
        "run",
        "--reload",
        "--port",
        "0",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            throttled(lambda: len(STARTED.findall(log.read_text())) >= 2 or proc.poll() is not None),
            timeout=3 * TIMEOUT,
            message="the parent and the child placed their jobs",
        )
        placed = {int(pid): (where, why) for pid, where, why in STARTED.findall(log.read_text())}
        assert placed[proc.pid][0] == "nowhere", log.read_text()  # the reloader's parent
        (child,) = [pid for pid, (where, _) in placed.items() if where == "here"]
        wait_until(throttled(lambda: _outcomes(db).count("ok") >= 3), timeout=3 * TIMEOUT, message="runs")
        # werkzeug's reloader turns SIGTERM into sys.exit(0) (exit hooks run) wherever the child's main
        # thread is. When that is inside a garbage collector's callback, Python prints "Exception ignored
        # in ..." and the SystemExit is lost, as a user's Ctrl+C would be: the signal is sent again then.
        for _ in range(3):
            lost = log.read_text().count(LOST_EXIT)
            os.kill(child, signal.SIGTERM)
            wait_until(
                throttled(lambda: proc.poll() is not None or log.read_text().count(LOST_EXIT) > lost),  # noqa: B023
                timeout=START_TIMEOUT,
                message=f"the reloader to exit after its child's SIGTERM (the log at the signal:)\n{log.read_text()}",
            )
            if proc.poll() is not None:
                break
        assert proc.wait(TIMEOUT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            stop_gracefully(proc, "flask run", log.read_text)
    runs = sql(db, "SELECT outcome, instance_id FROM persched_runs WHERE job_id = ?", (JOB,))
    assert {outcome for outcome, _ in runs} == {"ok"}, runs  # none left open, none lost
    assert {int(instance.split(":")[1]) for _, instance in runs} == {child}


@pytest.mark.slow
def test_other_flask_commands_start_no_scheduler_and_flask_persched_works_on_the_apps_database(tmp_path: Path) -> None:
    require("flask")
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    env = child_env()
    env.update(PERSCHED_DB=db)
    command = [sys.executable, "-m", "flask", "--app", "tests.support.flask_logged:app", "persched", "migrate"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3 * TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgraded from empty" in done.stdout, done.stdout  # the command line, on the app's database
    assert [where for _, where, _ in STARTED.findall(done.stderr)] == ["nowhere"], done.stderr
    assert "persched: scheduler" not in done.stderr, done.stderr  # no "scheduler ... started" line
