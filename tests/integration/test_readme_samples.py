"""The README's test samples run as a user runs them: saved as files beside its ``tasks.py``, under pytest.

Each block that opens with ``# test_<name>.py -- pytest`` is written out with
the quick start's ``tasks.py`` into an empty directory and run by pytest in a
child process (outside this repository's configuration; one child for all of
them), so a sample that stopped working fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

README: Final = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
_BLOCK: Final = re.compile(r"```python\n# (\S+\.py) -- ([^\n]*)\n(.*?)```", re.S)

SAMPLES: Final = {name: body for name, _, body in _BLOCK.findall(README) if name.startswith("test_")}
TASKS: Final = next(body for name, _, body in _BLOCK.findall(README) if name == "tasks.py")


def test_the_readme_has_its_test_samples() -> None:
    assert {"test_tasks.py", "test_tasks_freezegun.py", "test_tasks_time_machine.py"} <= set(SAMPLES)


@pytest.fixture(scope="module")
def sample_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each sample's outcome ("PASSED", "FAILED", ...), from one pytest child that runs them all, and its output."""
    where = tmp_path_factory.mktemp("samples")
    (where / "tasks.py").write_text(TASKS, encoding="utf-8")
    for name, body in SAMPLES.items():
        (where / name).write_text(body, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-W", "error", *sorted(SAMPLES)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    results = {
        m.group(1): m.group(2) for m in re.finditer(r"^(test_\S+\.py)::\S+ (PASSED|FAILED|ERROR)", done.stdout, re.M)
    }
    results["output"] = done.stdout + done.stderr
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_readme_test_sample_passes(sample_results: dict[str, str], name: str) -> None:
    assert sample_results.get(name) == "PASSED", sample_results["output"]
