"""The command line with namespaces and declared jobs, through real subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler, JobSpec
from tests.support.cli_run import RUN_TIMEOUT, cli_env, persched
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

NOOP: Final = "tests.support.cli_jobs:noop"


def job_ids(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [job["job_id"] for job in json.loads(proc.stdout)]


@pytest.fixture
def shared(tmp_path: Path) -> str:
    """A database holding a job of namespace "web", one of "worker" and one of the default namespace."""
    db = str(tmp_path / "shared.db")
    for namespace, job_id in (("web", "web-report"), ("worker", "worker-sync"), ("default", "legacy")):
        sched = JobScheduler(db, namespace=namespace)
        sched.schedule(job_id, NOOP, 3600.0)
        sched.shutdown()
    return db


def test_namespace_option_and_environment_select_the_application(shared: str) -> None:
    assert job_ids(persched("--db", shared, "--namespace", "web", "jobs", "--json")) == ["web-report"]
    assert job_ids(persched("--db", shared, "jobs", "--json", "--namespace", "worker")) == ["worker-sync"]
    assert job_ids(persched("--db", shared, "jobs", "--json", env={"PERSCHED_NAMESPACE": "web"})) == ["web-report"]
    assert job_ids(persched("--db", shared, "jobs", "--json")) == ["legacy"]  # the default namespace, as before
    (web,) = json.loads(persched("--db", shared, "--namespace", "web", "jobs", "--json").stdout)
    assert web["namespace"] == "web"


def test_a_command_cannot_touch_another_namespaces_job(shared: str) -> None:
    proc = persched("--db", shared, "--namespace", "web", "deschedule", "worker-sync")
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1
    assert job_ids(persched("--db", shared, "--namespace", "worker", "jobs", "--json")) == ["worker-sync"]


def test_a_bad_namespace_is_one_line_on_stderr(shared: str) -> None:
    proc = persched("--db", shared, "--namespace", "", "jobs")
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("persched: error: bad --namespace")


def test_run_declares_what_persched_setup_returns_with_prune(tmp_path: Path) -> None:
    db = str(tmp_path / "svc.db")
    before = JobScheduler(db, namespace="svc")
    before.declare([JobSpec("old", NOOP, 3600.0)])  # declared by an earlier release
    before.schedule("manual", NOOP, 3600.0)  # scheduled by hand: never pruned
    before.shutdown()
    (tmp_path / "svc_jobs.py").write_text(
        "from persched import JobSpec\n\n"
        "def persched_setup(scheduler):\n"
        f"    return [JobSpec('declared', {NOOP!r}, 3600.0)]\n"
    )
    proc = subprocess.Popen(
        # The jobs' callables live outside svc_jobs: allowed by name (persched run's default allows only svc_jobs).
        [
            sys.executable,
            "-m",
            "persched",
            "--db",
            db,
            "--namespace",
            "svc",
            "run",
            "--import",
            "svc_jobs",
            "--allow",
            "tests.support",
        ],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        view = JobScheduler(db, namespace="svc")
        try:
            wait_until(lambda: view.get_job("declared") is not None, timeout=RUN_TIMEOUT, message="declared")
            wait_until(lambda: view.get_job("old") is None, timeout=TIMEOUT, message="old pruned")
            assert {j.job_id for j in view.jobs()} == {"declared", "manual"}
        finally:
            view.shutdown()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, stderr
