"""The suite's own arrangement: the tests of several scheduler processes share one xdist worker.

tests/conftest.py puts them in one ``xdist_group``; pytest-xdist names the group in each node id
(``…@processes``), and its scheduler reads it from there. A pytest release that pytest-xdist
does not follow can drop that suffix without an error (pytest 9.2 with pytest-xdist 3.8): the
tests then run two or three at once, each starving the others of the cores it counts on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.xdist_group("processes")  # a member itself, so that a run of this file alone checks too
def test_the_tests_of_processes_form_one_xdist_group(request: pytest.FixtureRequest) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not request.config.getvalue("loadgroup"):
        pytest.skip("not under pytest-xdist --dist loadgroup: every test runs in this one process")
    grouped = {
        item.nodeid: marker.args[0]
        for item in request.session.items
        if (marker := item.get_closest_marker("xdist_group")) is not None
    }
    assert grouped[request.node.nodeid] == "processes"
    lost = [nodeid for nodeid, group in grouped.items() if not nodeid.endswith(f"@{group}")]
    assert not lost, f"{len(lost)} of {len(grouped)} tests of a group are not in it, e.g. {lost[0]}"


FAILS_WITH_A_SEED = """\
def test_draws(seed):
    assert seed == -1, "never"


def test_draws_nothing():
    assert False, "no seed here"
"""


def test_a_randomised_test_names_its_seed_in_its_failure(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.support.seeds import name_seed_in_failure, seed\npytest_runtest_makereport = name_seed_in_failure\n"
    )
    (tmp_path / "test_seeded.py").write_text(FAILS_WITH_A_SEED)
    env = dict(os.environ, PYTHONPATH=str(REPO), PERSCHED_SEED="4242")
    argv = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-rf", str(tmp_path)]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert any("test_draws " in line and "[PERSCHED_SEED=4242] AssertionError: never" in line for line in summary), (
        summary
    )
    assert any("test_draws_nothing" in line and "PERSCHED_SEED" not in line for line in summary), summary
    assert "replay: PERSCHED_SEED=4242 python -m pytest -n0 'test_seeded.py::test_draws'" in proc.stdout
