"""persched.integrations.django with real Django, on the example project (examples/django_app).

In this process (settings of tests/support/django_example.py): ``ready()``
and management commands start nothing; ``manage.py persched`` is the
command line on the project's settings; the ``PERSCHED`` setting and
Django's default database give the URL, bad settings a clear error. As
processes (slow): ``runserver``'s autoreloader child runs the jobs from its
start and its parent none; ``manage.py persched run`` is a dedicated
scheduler process; each stops cleanly on SIGTERM; the admin, in a project
of its own, follows Django's permissions. The dashboard view:
tests/integration/test_dashboard_frameworks.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from persched.errors import PerschedError, SchedulerStateError
from tests.multi._cluster import REPO, child_env, throttled
from tests.support.django_example import example_settings, persched_setting
from tests.support.frameworks import require
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from collections.abc import Mapping

INTERVAL: Final = 0.2
JOB: Final = "django.cleanup"
MANAGE: Final = (sys.executable, "-m", "examples.django_app.manage")
PLACED: Final = re.compile(r"persched: jobs of process (\d+): (here|nowhere|forked workers) \((.*)\)")


def _persched_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("persched-")}


def _log_pids(log: Path) -> list[int]:
    return [int(line.split("\t")[2]) for line in log.read_text().splitlines()] if log.exists() else []


def _runs(db: str) -> list[tuple[str | None, str]]:
    return [(r[0], r[1]) for r in sql(db, "SELECT outcome, instance_id FROM persched_runs WHERE job_id = ?", (JOB,))]


# -- in this process -------------------------------------------------------------------------------------


def test_setup_and_management_commands_start_nothing(tmp_path: Path) -> None:
    example_settings()
    from django.core.management import call_command
    from django.test.utils import override_settings

    from persched.integrations.django import scheduler
    from persched.integrations.django.apps import placement

    before = _persched_threads()  # django.setup() ran ready() already
    with override_settings(PERSCHED=persched_setting(f"sqlite:///{tmp_path / 'none.db'}")):
        call_command("check", verbosity=0)
        assert _persched_threads() == before
        assert placement().where == "nowhere"
        with pytest.raises(SchedulerStateError, match="START"):
            scheduler()
    with override_settings(PERSCHED=persched_setting("x.db", START=True)):
        assert placement().where == "here"  # not a management command: a process that serves
    assert not (tmp_path / "none.db").exists()


def test_manage_py_persched_is_the_command_line_on_the_projects_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example_settings()
    from django.core.management import CommandError, call_command
    from django.test.utils import override_settings

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    with override_settings(PERSCHED=persched_setting(db, NAMESPACE="django-cli")):
        call_command("persched", "migrate")  # persched's own revisions, not Django's migrations
        assert "upgraded from empty" in capsys.readouterr().out
        call_command("persched", "jobs")
        assert "no active jobs in namespace 'django-cli'" in capsys.readouterr().out
        with pytest.raises(CommandError) as refused:
            call_command("persched", "show", "no-such-job")
        assert refused.value.returncode == 1
    assert sql(db, "SELECT COUNT(*) FROM persched_jobs") == [(0,)]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")
@pytest.mark.parametrize(
    ("database", "url"),
    [
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": Path("/srv/app/db.sqlite3")}, "/srv/app/db.sqlite3"),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "app", "USER": "u", "PASSWORD": "p@ss", "HOST": "db"},
            "postgresql+psycopg://u:p%40ss@db/app",
        ),
        (
            {"ENGINE": "django.db.backends.mysql", "NAME": "app", "USER": "u", "HOST": "db", "PORT": "3307"},
            "mysql+pymysql://u@db:3307/app",
        ),
    ],
)
def test_the_url_defaults_to_djangos_default_database(database: Mapping[str, object], url: str) -> None:
    example_settings()
    from django.test.utils import override_settings

    from persched.integrations.django import conf

    with override_settings(DATABASES={"default": database}, PERSCHED={}):
        assert conf.url() == url


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")
def test_bad_settings_are_a_clear_error() -> None:
    example_settings()
    from django.test.utils import override_settings

    from persched.integrations.django import conf

    memory = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    with override_settings(DATABASES=memory, PERSCHED={}), pytest.raises(PerschedError, match=r"PERSCHED\['URL'\]"):
        conf.url()
    with override_settings(PERSCHED={"URL": "x.db", "JOB": "typo"}), pytest.raises(PerschedError, match="'JOB'"):
        conf.url()
    with (
        override_settings(PERSCHED={"JOBS": "persched.integrations.django.conf.KEYS"}),
        pytest.raises(PerschedError, match="JobSpec"),
    ):
        conf.jobs()


# -- the processes of a deployment ------------------------------------------------------------------------


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


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(3 * TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)
        raise


def _free_port() -> int:
    # runserver needs a number (it prints the one it was given); the port is free when asked, which suffices here.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_under_runserver_the_autoreloaders_child_runs_the_jobs_from_its_start_and_its_parent_none(
    tmp_path: Path,
) -> None:
    require("django")
    db, log, out_path = f"sqlite:///{tmp_path / 'django.db'}", tmp_path / "runs.tsv", tmp_path / "out.log"
    with out_path.open("wb") as out:
        # The autoreloader on (the default): this process watches files and runs the server in a child.
        command = [*MANAGE, "runserver", f"127.0.0.1:{_free_port()}", "--skip-checks"]
        proc = subprocess.Popen(command, cwd=REPO, env=_env(db, log), stdout=out, stderr=out)
    try:
        wait_until(throttled(lambda: len(_log_pids(log)) >= 2), timeout=3 * TIMEOUT, message="two runs, no request")
        placed = {int(pid): where for pid, where, _ in PLACED.findall(out_path.read_text())}
        (child,) = [pid for pid, where in placed.items() if where == "here"]
        assert placed == {proc.pid: "nowhere", child: "here"}, out_path.read_text()
        # The child ends by SystemExit in its main thread (Django's reloader turns SIGTERM into
        # sys.exit(0), the path of a reload's sys.exit(3)): persched's exit hook shuts its scheduler down.
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


@pytest.mark.slow
def test_manage_py_persched_run_is_a_dedicated_process_and_stops_gracefully(tmp_path: Path) -> None:
    require("django")
    db, log, out_path = f"sqlite:///{tmp_path / 'django.db'}", tmp_path / "runs.tsv", tmp_path / "out.log"
    env = _env(db, log, EXAMPLE_START="0")  # web processes run none: this process does
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [*MANAGE, "persched", "run", "--workers", "2"], cwd=REPO, env=env, stdout=out, stderr=out
        )
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
    assert {where for _, where, _ in PLACED.findall(text)} == {"nowhere"}, text  # ready() in a command: none
    assert set(_log_pids(log)) == {proc.pid}
    runs = _runs(db)
    assert [outcome for outcome, _ in runs] == ["ok"] * len(runs)
    assert {instance.split(":")[1] for _, instance in runs} == {str(proc.pid)}


@pytest.mark.slow
def test_the_admin_lists_jobs_and_runs_and_its_actions_follow_django_permissions(tmp_path: Path) -> None:
    require("django")
    db = tmp_path / "admin.db"
    command = [sys.executable, "-m", "tests.support.django_admin_check", str(db)]
    done = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=3 * TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert "upgraded from empty" in facts["persched_migrate"]  # persched's revisions, in Django's database
    assert facts["permissions"] == ["deschedule_job", "operate_job", "view_job", "view_run"]
    assert facts["viewer_list"] == [200, True, True]
    assert facts["viewer_actions"] == []  # view permission only: no action offered ...
    assert facts["after_viewer_pause"] == ["scheduled", 0]  # ... nor taken
    assert facts["after_operator_pause"] == ["scheduled", 1]  # operate_job: paused through persched
    assert facts["after_operator_deschedule"] == ["scheduled", 0]  # not deschedule_job
    assert facts["root_actions"] == ["pause", "resume", "run_now", "deschedule"]  # never Django's bulk delete
    assert facts["after_root_deschedule"] == ["descheduled", 0]
    assert (facts["runs_ok"], facts["runs_error"]) == (1, 0)  # the runs, filtered by outcome
    assert facts["change_page"] == 200  # a read-only page: nothing is edited through the ORM
