"""The Django recipe (examples/django_app) with real Django: who starts the scheduler, and that its job runs.

In this process, settings configured in code (the example's own values,
without its logging set-up): ready() and management commands start nothing,
and a request starts the process's scheduler only when web processes run
jobs (``PERSCHED_IN_WEB_PROCESSES``). In subprocesses (slow): the
``persched_run`` management command is the dedicated process and stops
gracefully on SIGTERM; under ``runserver`` with its autoreloader the
reloader's parent never starts a scheduler, its serving child does, and that
child shuts it down when it exits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from tests.multi._cluster import REPO, child_env, throttled
from tests.support.frameworks import require
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

INTERVAL: Final = 0.2
JOB: Final = "django.cleanup"
MANAGE: Final = (sys.executable, "-m", "examples.django_app.manage")


def _persched_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("persched-")}


def _log_pids(log: Path) -> list[int]:
    return [int(line.split("\t")[2]) for line in log.read_text().splitlines()] if log.exists() else []


def _env(db: str, log: Path, **extra: str) -> dict[str, str]:
    env = child_env()
    env.pop("RUN_MAIN", None)  # the autoreloader's own marker of its child
    env.update(
        DJANGO_SETTINGS_MODULE="examples.django_app.settings",
        PERSCHED_DB=db,
        EXAMPLE_INTERVAL=str(INTERVAL),
        EXAMPLE_LOG=str(log),
        **extra,
    )
    return env


def _runs(db: str) -> list[tuple[str | None, str]]:
    return [(r[0], r[1]) for r in sql(db, "SELECT outcome, instance_id FROM persched_runs WHERE job_id = ?", (JOB,))]


@pytest.fixture(scope="module")
def django_settings() -> Any:  # noqa: ANN401 - django.conf.settings (Django ships no types)
    """Django set up in this process with the example's settings, given in code."""
    require("django")
    import django
    from django.conf import settings

    from examples.django_app import settings as example

    if not settings.configured:
        values = {name: getattr(example, name) for name in dir(example) if name.isupper()}
        # Not the example's console handler: a handler bound to pytest's captured stderr outlives the test.
        values.update(LOGGING_CONFIG=None, LOGGING={})
        settings.configure(**values)
        django.setup()
    return settings


@pytest.fixture
def web_settings(django_settings: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:  # noqa: ANN401 - as above
    """Per-test persched settings (a fresh database file); this process's scheduler forgotten afterwards."""
    from django.test.utils import override_settings

    from examples.django_app.scheduler import forget_process_scheduler

    values = {
        "PERSCHED_DB": f"sqlite:///{tmp_path / 'django.db'}",
        "EXAMPLE_INTERVAL": INTERVAL,
        "EXAMPLE_LOG": str(tmp_path / "runs.tsv"),
        "PERSCHED_IN_WEB_PROCESSES": False,
    }
    try:
        yield values
    finally:
        with override_settings(**values):
            forget_process_scheduler(timeout=TIMEOUT)


def test_ready_and_management_commands_start_nothing_and_requests_only_read(web_settings: dict[str, Any]) -> None:
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import override_settings

    from examples.django_app.scheduler import process_scheduler

    before = _persched_threads()  # django.setup() ran ready() already
    with override_settings(**web_settings):
        call_command("check", verbosity=0)
        response = Client().get("/jobs/")  # request_started fired; web processes run no jobs by default
        assert response.status_code == 200
        assert json.loads(response.content)["jobs"] == []  # nothing declared: that is persched_run's job
        assert _persched_threads() == before  # read through a scheduler that was never started
        assert process_scheduler().get_job(JOB) is None


def test_with_web_processes_running_jobs_the_first_request_starts_this_processs_scheduler(
    web_settings: dict[str, Any],
) -> None:
    from django.test import Client
    from django.test.utils import override_settings

    from examples.django_app.scheduler import process_scheduler

    log = web_settings["EXAMPLE_LOG"]
    with override_settings(**{**web_settings, "PERSCHED_IN_WEB_PROCESSES": True}):
        assert not _persched_threads()
        response = Client().get("/jobs/")
        assert response.status_code == 200
        body = json.loads(response.content)
        assert [(j["job_id"], j["namespace"], j["declared"]) for j in body["jobs"]] == [(JOB, "django-example", True)]
        assert _persched_threads()  # started by the request, in the serving process
        sched = process_scheduler()
        assert Client().get("/jobs/").status_code == 200
        assert process_scheduler() is sched
        wait_until(throttled(lambda: len(_log_pids(Path(log))) >= 2), message="two runs of the Django job")
        assert set(_log_pids(Path(log))) == {os.getpid()}


# -- the processes of a deployment ------------------------------------------------------------------------


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(3 * TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)
        raise


@pytest.mark.slow
def test_the_persched_run_command_is_the_dedicated_process_and_stops_gracefully(tmp_path: Path) -> None:
    require("django")
    db, log, out_path = f"sqlite:///{tmp_path / 'django.db'}", tmp_path / "runs.tsv", tmp_path / "out.log"
    env = _env(db, log)
    with out_path.open("wb") as out:
        proc = subprocess.Popen([*MANAGE, "persched_run", "--workers", "2"], cwd=REPO, env=env, stdout=out, stderr=out)
    try:
        wait_until(
            throttled(lambda: len(_log_pids(log)) >= 3 or proc.poll() is not None),
            timeout=3 * TIMEOUT,
            message="three runs",
        )
        assert proc.poll() is None, out_path.read_text()
    finally:
        code = _stop(proc)
    text = out_path.read_text()
    assert code == 0, text
    assert "persched: running 1 jobs of namespace 'django-example'" in text, text
    assert "persched: stopped" in text, text
    assert set(_log_pids(log)) == {proc.pid}
    runs = _runs(db)
    assert [outcome for outcome, _ in runs] == ["ok"] * len(runs)
    assert len(runs) == len(_log_pids(log))
    assert {instance.split(":")[1] for _, instance in runs} == {str(proc.pid)}


def _free_port() -> int:
    # runserver needs a number (it prints the one it was given); the port is free when asked, which suffices here.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_under_runserver_autoreload_only_the_serving_child_runs_jobs_and_its_exit_closes_them(tmp_path: Path) -> None:
    require("django")
    db, log, out_path = f"sqlite:///{tmp_path / 'django.db'}", tmp_path / "runs.tsv", tmp_path / "out.log"
    env = _env(db, log, EXAMPLE_IN_WEB_PROCESSES="1")
    port = _free_port()
    with out_path.open("wb") as out:
        # The autoreloader on (the default): this process watches files and runs the server in a child.
        proc = subprocess.Popen(
            [*MANAGE, "runserver", f"127.0.0.1:{port}", "--skip-checks"], cwd=REPO, env=env, stdout=out, stderr=out
        )
    served_by: list[int] = []

    def ask() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/", timeout=TIMEOUT) as response:
                served_by.append(json.loads(response.read())["pid"])
        except OSError:
            assert proc.poll() is None, out_path.read_text()
            return False
        return True

    try:
        wait_until(throttled(ask), timeout=3 * TIMEOUT, message="runserver answers")
        child = served_by[-1]
        assert child != proc.pid  # the reloader's child serves
        wait_until(throttled(lambda: len(_log_pids(log)) >= 2), message="two runs")
        # The child ends by SystemExit in its main thread, as a reload ends it (the autoreloader's
        # sys.exit(3)): persched's exit hook shuts its scheduler down. The parent sees a normal exit
        # and ends too (on 3 it would start a new child instead).
        os.kill(child, signal.SIGTERM)
        code = proc.wait(3 * TIMEOUT)
    finally:
        if proc.poll() is None:
            _stop(proc, signal.SIGKILL)
    assert code == 0, out_path.read_text()
    assert set(_log_pids(log)) == {child}  # never the reloader's parent
    runs = _runs(db)
    assert {instance.split(":")[1] for _, instance in runs} == {str(child)}
    assert [outcome for outcome, _ in runs] == ["ok"] * len(runs)  # none left open by the exit
