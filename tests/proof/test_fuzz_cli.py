"""Fuzzed command line: `persched.cli.main(argv)` in process, a few cases as subprocesses.

Allowed: exit code 0, 1 or 2, and never a traceback on stderr. ``run`` and
``demo`` are left out of the in-process fuzz (they run until stopped / for a
while); ``run --import`` of a missing module is checked as a subprocess.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persched import JobScheduler
from persched.cli import main
from tests.proof._settings import fuzz_settings
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

COMMANDS = [
    "migrate",
    "jobs",
    "show",
    "runs",
    "deschedule",
    "pause",
    "resume",
    "run-now",
    "--help",
    "-h",
    "frobnicate",
    "",
]
OPTIONS = ["--json", "--limit", "--db", "--debug", "-v", "--verbose", "--workers", "--import", "--", "-x"]
words = st.sampled_from(["a", "0", "-1", "99999999999999999999", "nan", "x" * 300, "\x00", "é", "", "job-1", "ok"])
# Wrong shapes: a 5,000-digit number (int() refuses it), 2**31, a
# lone surrogate (what Python makes of undecodable argv bytes), NUL inside a word.
wrong = st.sampled_from(["9" * 5000, str(2**31), "job-\udcff", "\udc80", "a\x00b", "x" * 70_000, "--limit=" + "9" * 30])
argvs = st.lists(st.sampled_from(COMMANDS) | st.sampled_from(OPTIONS) | words | wrong | st.text(max_size=6), max_size=6)


@pytest.fixture(scope="module", autouse=True)
def _in_a_scratch_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A fuzzed argv may name a database ("--db migrate") or fall back to ./persched.db:
    such files go to a scratch directory, never into the checkout."""
    previous = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cli") / "cli.db"
    sched = JobScheduler(f"sqlite:///{path}")
    sched.schedule("job-1", "tests.support.proof_jobs:noop", 60.0)
    sched.shutdown()
    return str(path)


def _run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help and usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
    return code, capsys.readouterr().err


@fuzz_settings(250)
@given(argv=argvs, with_db=st.booleans())
def test_cli_exits_0_1_2_without_a_traceback(
    db: str, argv: list[str], with_db: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    if any(a in ("run", "demo") for a in argv):
        return
    full = ["--db", db, *argv] if with_db else argv
    code, err = _run_main(full, capsys)
    assert code in (0, 1, 2), (full, code, err)
    if "--debug" not in full:
        assert "Traceback" not in err, (full, err)
    # An "unexpected" error is an exception that escaped validation.
    assert "unexpected" not in err, (full[:6], err[:300])


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--import", "no_such_module_xyz"],
        ["show", "no-such-job"],
        ["jobs"],
        ["runs", "--limit", "0"],
        ["deschedule", "\x01"],
    ],
)
def test_cli_subprocess_exits_cleanly(tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "missing.db"
    proc = subprocess.run(
        [sys.executable, "-m", "persched", "--db", str(db), *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
        check=False,
    )
    assert proc.returncode in (1, 2), (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip(), "an error must say something"
