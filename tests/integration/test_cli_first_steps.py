"""What a new user types first, through real ``python -m persched``: --version, ``run MODULE``, ``--json`` first.

- ``persched --version`` prints ``persched X.Y.Z``, from `persched.__version__`,
  the one place the version is written (pyproject.toml reads it).
- ``persched run MODULE`` and ``persched run --import MODULE`` both name the
  module; neither, or both, is a one-line usage error (exit 2) that shows the
  form to use.
- ``--json`` is accepted before the command, as ``--db`` is; before a command
  that prints no JSON it is a usage error.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Final

import pytest

import persched
from persched import JobScheduler
from tests.support.cli_run import REPO
from tests.support.cli_run import persched as run_cli

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

pytestmark = pytest.mark.slow

# A module whose setup hook schedules one job, then asks its own process to stop: `persched run` then
# shuts down gracefully (exit 0) without a test having to time a signal.
STOPPER: Final = """\
import os
import signal


def noop():
    pass


def persched_setup(scheduler):
    scheduler.schedule("from-stopper", "stopper:noop", 3600.0)
    os.kill(os.getpid(), signal.SIGTERM)
"""


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_version_prints_the_package_version() -> None:
    proc = run_cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"persched {persched.__version__}\n", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+", persched.__version__)
    # The version is written once: pyproject.toml takes it from the package.
    pyproject = (REPO / "pyproject.toml").read_text()
    project = pyproject.split("\n[project]\n", 1)[1].split("\n[", 1)[0]  # the [project] table's own lines
    assert re.search(r'^dynamic = \["version"\]', project, re.MULTILINE)
    assert not re.search(r"^version\b", project, re.MULTILINE)
    assert '\n[tool.setuptools.dynamic]\nversion = { attr = "persched.__version__" }' in pyproject


@pytest.mark.parametrize("form", [["stopper"], ["--import", "stopper"]])
def test_run_takes_the_module_as_an_argument_or_with_import(tmp_path: Path, form: list[str]) -> None:
    (tmp_path / "stopper.py").write_text(STOPPER)
    db = tmp_path / "run.db"
    proc = run_cli("--db", str(db), "run", *form, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    with JobScheduler(str(db)) as sched:
        assert [job.job_id for job in sched.jobs()] == ["from-stopper"]


def test_run_without_a_module_says_how_to_name_it(tmp_path: Path) -> None:
    line = one_line_error(run_cli("--db", str(tmp_path / "run.db"), "run"), 2)
    assert line == (
        "persched run: error: which module? `persched run myapp.schedules` (or `--import myapp.schedules`)"
        " (see persched run --help)"
    )
    both = one_line_error(run_cli("--db", str(tmp_path / "run.db"), "run", "a", "--import", "b"), 2)
    assert "name the module once" in both
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_run_of_a_module_that_does_not_exist_names_it(tmp_path: Path) -> None:
    line = one_line_error(run_cli("--db", str(tmp_path / "run.db"), "run", "no_such_module_here"), 1)
    assert "cannot import module 'no_such_module_here'" in line


def test_json_before_the_command(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    with JobScheduler(db) as sched:
        sched.schedule("report", "tests.support.cli_jobs:noop", 3600.0)
    for argv in (["--json", "jobs"], ["jobs", "--json"], ["--json", "--db", db, "jobs"]):
        proc = run_cli("--db", db, *argv)
        assert proc.returncode == 0, proc.stderr
        assert [job["job_id"] for job in json.loads(proc.stdout)] == ["report"]
    shown = run_cli("--db", db, "--json", "show", "report")
    assert json.loads(shown.stdout)["job_id"] == "report"
    runs = run_cli("--db", db, "--json", "runs")
    assert json.loads(runs.stdout) == []
    line = one_line_error(run_cli("--db", db, "--json", "migrate"), 2)
    assert line == (
        "persched: error: --json is an option of jobs, show, runs, instances, check, next, not of migrate"
        " (see persched --help)"
    )
