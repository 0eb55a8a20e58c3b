"""`persched run --import` with hostile or broken modules: one clear line, exit 1, the database untouched.

Each module is written into the test's directory, which the command puts on
sys.path as ``python -m`` does. The database holds one job before each
attempt; after it, its row is the same.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from tests.support.helpers import TIMEOUT, sql
from tests.support.served import REPO, Served

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

MODULES = {
    "raises_at_import": ('raise RuntimeError("boom at import")', "RuntimeError: boom at import"),
    "exits_at_import": ("import sys\nsys.exit(7)", "it called sys.exit(7)"),
    "bad_syntax": ("def (", "SyntaxError"),
    "setup_raises": ('def persched_setup(s):\n    raise ValueError("no")', "persched_setup() raised ValueError: no"),
    "setup_exits": ("def persched_setup(s):\n    raise SystemExit(5)", "persched_setup() raised SystemExit: 5"),
    "setup_bad_specs": ('def persched_setup(s):\n    return ["not a spec"]', "must hold JobSpec values"),
}


def _database(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'hostile.db'}"
    sched = JobScheduler(db)
    sched.schedule("kept", "tests.support.cli_jobs:noop", 3600.0)
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return db


def _jobs(db: str) -> list[tuple[object, ...]]:
    return sql(db, "SELECT job_id, state, generation, target FROM persched_jobs ORDER BY job_id")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_hostile_module_is_one_line_and_exit_1(tmp_path: Path, name: str) -> None:
    source, message = MODULES[name]
    (tmp_path / f"{name}.py").write_text(source + "\n")
    db = _database(tmp_path)
    before = _jobs(db)
    done = subprocess.run(
        [sys.executable, "-m", "persched", "--db", db, "run", "--import", name],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("persched: error:")]
    assert len(errors) == 1, done.stderr
    assert message in errors[0]
    assert "Traceback" not in done.stderr
    assert _jobs(db) == before


@pytest.mark.parametrize("name", ["../etc/passwd", ".relative", "a\x01b", "", "os.path:join"])
def test_module_names_that_are_not_modules(tmp_path: Path, name: str) -> None:
    db = _database(tmp_path)
    before = _jobs(db)
    done = subprocess.run(
        [sys.executable, "-m", "persched", "--db", db, "run", "--import", name],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("persched: error: cannot import module")
    assert _jobs(db) == before


def test_a_module_whose_thread_outlives_the_scheduler_is_named(tmp_path: Path) -> None:
    (tmp_path / "lingers.py").write_text(
        "import threading\nstop = threading.Event()\n"
        "threading.Thread(target=stop.wait, name='lingering-worker').start()  # not a daemon\n"
    )
    db = _database(tmp_path)
    served = Served("--db", db, "run", "--import", "lingers", cwd=tmp_path, env_extra={"PYTHONPATH": str(REPO)})
    try:
        served.wait_for(r"SIGINT or SIGTERM stops it")
        served.proc.send_signal(signal.SIGTERM)
        served.wait_for(r"keep the process alive \(lingering-worker; from lingers\?\)")
        assert served.proc.poll() is None  # the module's thread holds it, as the warning says
    finally:
        code = served.stop()  # a second SIGTERM: it ends
    assert code != 0
    assert _jobs(db)[0][0] == "kept"
