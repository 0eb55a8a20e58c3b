"""The README's test samples run as a user runs them: saved as files beside its ``tasks.py``, under pytest.

Each block that opens with ``# test_<name>.py -- pytest`` is written out with
the quick start's ``tasks.py`` into an empty directory and run by pytest in a
child process (outside this repository's configuration), so a sample that
stopped working fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
README: Final = (REPO / "README.md").read_text(encoding="utf-8")
_BLOCK: Final = re.compile(r"```python\n# (\S+\.py) -- ([^\n]*)\n(.*?)```", re.S)

SAMPLES: Final = {name: body for name, _, body in _BLOCK.findall(README) if name.startswith("test_")}
TASKS: Final = next(body for name, _, body in _BLOCK.findall(README) if name == "tasks.py")


def test_the_readme_has_its_test_samples() -> None:
    assert {"test_tasks.py", "test_tasks_freezegun.py", "test_tasks_time_machine.py"} <= set(SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_readme_test_sample_passes(tmp_path: Path, name: str) -> None:
    (tmp_path / "tasks.py").write_text(TASKS, encoding="utf-8")
    (tmp_path / name).write_text(SAMPLES[name], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout
