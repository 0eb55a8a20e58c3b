"""The WSGI recipes under a real gunicorn (the ``examples`` extra), two sync workers, with and without ``--preload``.

- Without ``--preload``: `examples/wsgi_app.py`, the app docs/multi.md recommends for
  ``gunicorn -w 4`` (each worker imports it after the fork and starts its own scheduler).
- The Flask integration (`examples/flask_app.py`) with ``--preload``, on one SQLite file and on
  PostgreSQL: the master loads the app and starts no scheduler; each worker starts its own as
  it is forked, before any request. (Without ``--preload`` a worker loads the app itself: the
  process that serves, as in tests/integration/test_integration_flask.py.)
- The Django integration (`examples/django_app`) with ``--preload``: the same placement.
- With ``--preload`` and `examples/wsgi_app.py` (the mistake): the scheduler started at import
  in the master stays the master's. Each worker logs the fork WARNING and its requests fail with
  SchedulerStateError (docs/reference/behaviour.md, "Forks"); the jobs run in the master, once per slot.

Each: the 0.2 s job runs, no slot twice in the history, SIGTERM to the master ends everything
with exit 0 and no run left open. In CI a missing gunicorn fails (tests/support/frameworks.py).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import urllib.error
import urllib.request
from importlib.metadata import version
from typing import TYPE_CHECKING, Final

import pytest

from tests.multi._cluster import REPO, check_once, child_env, fetch_runs, throttled
from tests.support.frameworks import require
from tests.support.helpers import START_TIMEOUT, TIMEOUT, stop_gracefully, wait_until
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.multi._cluster import RunRow

pytestmark = [pytest.mark.slow, pytest.mark.processes]

INTERVAL: Final = 0.2
RUNS: Final = 5
LISTENING: Final = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
FORK_WARNING: Final = "was forked from process"


class Gunicorn:
    """A real gunicorn master (`python -m gunicorn`) on a free port, its output in a file."""

    def __init__(self, tmp_path: Path, app: str, *options: str, env: dict[str, str]) -> None:
        self.log = tmp_path / "gunicorn.log"
        command = [sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", "127.0.0.1:0"]
        if tuple(int(part) for part in version("gunicorn").split(".")[:2]) >= (25, 1):
            # gunicorn 25.1+ opens a control socket at ~/.gunicorn/gunicorn.ctl by default: one for every test.
            command.append("--no-control-socket")
        command += ["--graceful-timeout", "5", *options, app]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait_until(
            throttled(lambda: LISTENING.search(self.output()) is not None or self.proc.poll() is not None),
            timeout=3 * TIMEOUT,
            message="gunicorn listening",
        )
        assert self.proc.poll() is None, self.output()
        match = LISTENING.search(self.output())
        assert match is not None
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, bytes]:
        """The response to a GET; bounded as a start-up is: without --preload a worker imports the
        app (and starts its scheduler) only once it was forked, after the master listens."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=START_TIMEOUT) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read()

    def terminate(self) -> int:
        """SIGTERM to the master (gunicorn's graceful stop); its exit status."""
        return stop_gracefully(self.proc, "gunicorn", self.output)


def _env(db: str, **extra: str) -> dict[str, str]:
    env = child_env()
    env.update(PERSCHED_DB=db, EXAMPLE_INTERVAL=str(INTERVAL), **extra)
    return env


def _pid(run: RunRow) -> int:
    return int(run.instance_id.split(":")[1])  # host:pid:... (the README's instance_id)


def _finished(db: str) -> list[RunRow]:
    return [r for r in fetch_runs(db) if r.outcome is not None]


def _check_history(db: str, job_id: str) -> list[RunRow]:
    runs = fetch_runs(db)
    assert {r.job_id for r in runs} == {job_id}
    check_once(runs, None, {job_id: INTERVAL}, {job_id: min(r.scheduled_for for r in runs)})  # none open
    assert all(r.outcome == "ok" for r in runs), [(r.scheduled_for, r.outcome) for r in runs]
    return runs


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Gunicorn]]:
    """Every gunicorn a test starts; one still running at the end (a failed test) is stopped."""
    servers: list[Gunicorn] = []
    yield servers
    for server in servers:
        if server.proc.poll() is None:
            server.terminate()


def test_without_preload_each_worker_starts_its_scheduler_at_import_and_every_slot_runs_once(
    tmp_path: Path, served: list[Gunicorn]
) -> None:
    require("gunicorn")
    db = f"sqlite:///{tmp_path / 'app.db'}"
    server = Gunicorn(tmp_path, "examples.wsgi_app:application", env=_env(db))
    served.append(server)
    status, body = server.get("/")
    assert status == 200, server.output()
    assert b'"refresh-cache"' in body
    wait_until(throttled(lambda: len(_finished(db)) >= RUNS), timeout=3 * TIMEOUT, message=f"{RUNS} runs")
    assert server.terminate() == 0, server.output()
    out = server.output()
    workers = {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", out)}
    assert len(workers) == 2, out
    # Both workers started a scheduler (at import, after the fork) and shut it down at exit.
    started = {int(p) for p in re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ started", out)}
    stopped = {int(p) for p in re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ shut down", out)}
    assert started == stopped == workers, out
    assert FORK_WARNING not in out
    runs = _check_history(db, "refresh-cache")
    assert {_pid(r) for r in runs} <= workers


PLACED: Final = re.compile(r"persched: jobs of process (\d+): ([a-z ]+) \(")


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_flask_integration_under_preload_runs_the_jobs_in_each_worker_before_any_request_and_every_slot_once(
    tmp_path: Path, served: list[Gunicorn], engine: str
) -> None:
    require("gunicorn", "flask")
    with contextlib.ExitStack() as stack:
        db = f"sqlite:///{tmp_path / 'app.db'}" if engine == "sqlite" else stack.enter_context(pg_schema("gunicorn"))
        server = Gunicorn(tmp_path, "tests.support.flask_logged:app", "--preload", env=_env(db))
        served.append(server)
        master = server.proc.pid
        # No request: each worker started its scheduler as it began (after the fork).
        wait_until(throttled(lambda: "persched: declared 1 job" in server.output()), message="jobs declared")
        wait_until(throttled(lambda: len(_finished(db)) >= RUNS), timeout=3 * TIMEOUT, message=f"{RUNS} runs")
        status, body = server.get("/jobs")
        assert status == 200, server.output()
        assert b'"flask.sync"' in body
        assert server.get("/nothing-here")[0] == 404
        assert server.terminate() == 0, server.output()
        out = server.output()
        workers = {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", out)}
        assert len(workers) == 2, out
        placed = {int(pid): where for pid, where in PLACED.findall(out)}
        assert placed == {master: "forked workers", **dict.fromkeys(workers, "here")}, out  # none in the master
        started = {int(p) for p in re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ started", out)}
        stopped = {int(p) for p in re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ shut down", out)}
        assert started == stopped == workers, out  # one per worker, shut down at its exit
        assert FORK_WARNING not in out, out
        assert "Traceback" not in out, out
        runs = _check_history(db, "flask.sync")
        assert {_pid(r) for r in runs} <= workers


def test_the_django_integration_under_preload_runs_the_jobs_in_each_worker_and_none_in_the_master(
    tmp_path: Path, served: list[Gunicorn]
) -> None:
    require("gunicorn", "django")
    db = f"sqlite:///{tmp_path / 'app.db'}"
    server = Gunicorn(tmp_path, "examples.django_app.wsgi:application", "--preload", env=_env(db))
    served.append(server)
    wait_until(throttled(lambda: "declared 1 job" in server.output()), message="jobs declared")
    wait_until(throttled(lambda: len(_finished(db)) >= RUNS), timeout=3 * TIMEOUT, message=f"{RUNS} runs")
    assert server.terminate() == 0, server.output()
    out = server.output()
    workers = {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", out)}
    placed = {int(pid): where for pid, where in PLACED.findall(out)}
    assert placed == {server.proc.pid: "forked workers", **dict.fromkeys(workers, "here")}, out
    assert FORK_WARNING not in out, out
    runs = _check_history(db, "django.cleanup")
    assert {_pid(r) for r in runs} <= workers


def test_preload_with_a_scheduler_started_at_import_is_refused_in_the_workers(
    tmp_path: Path, served: list[Gunicorn]
) -> None:
    require("gunicorn")
    db = f"sqlite:///{tmp_path / 'app.db'}"
    server = Gunicorn(tmp_path, "examples.wsgi_app:application", "--preload", env=_env(db))
    served.append(server)
    master = server.proc.pid
    status, _ = server.get("/")
    assert status == 500  # the worker's request used the master's scheduler: SchedulerStateError
    wait_until(throttled(lambda: len(_finished(db)) >= RUNS), timeout=3 * TIMEOUT, message=f"{RUNS} runs")
    wait_until(
        throttled(lambda: server.output().count(FORK_WARNING) == 2), timeout=TIMEOUT, message="two fork warnings"
    )
    assert server.terminate() == 0, server.output()
    out = server.output()
    workers = {int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", out)}
    assert len(workers) == 2, out
    warned = {int(p) for p in re.findall(rf"WARNING \[(\d+)\] persched: process \d+ {FORK_WARNING} {master}\b", out)}
    assert warned == workers, out
    assert "SchedulerStateError: this JobScheduler belongs to process" in out
    assert "without --preload" in out  # the error says what to do
    # The only scheduler is the master's: it ran every slot, once, and shut down at the master's exit.
    started = re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ started", out)
    stopped = re.findall(r"INFO \[(\d+)\] persched: scheduler \S+ shut down", out)
    assert started == stopped == [str(master)], out
    runs = _check_history(db, "refresh-cache")
    assert {_pid(r) for r in runs} == {master}
