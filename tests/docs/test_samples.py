"""Every sample of README.md and docs/ runs, as tests/docs/samples.py describes; each page in a directory of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.docs.samples import NOT_YET, REPO, Block, blocks, console_matches, pages

CHILD: Final = Path(__file__).with_name("_child.py")
RUNNABLE: Final = [page for page in pages() if any(b.kind not in ("excerpt",) for b in blocks(page))]


def _env(where: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(where), str(REPO)])
    return env


def test_the_conventions_find_the_samples() -> None:
    readme = {b.path for b in blocks("README.md")}
    assert {"tasks.py", "main.py", "test_tasks.py"} <= readme
    testing = {b.path for b in blocks("docs/tutorials/testing.md") if b.kind == "test"}
    assert testing == {"test_tasks.py", "test_tasks_freezegun.py", "test_tasks_time_machine.py"}
    assert all((REPO / page).exists() for page in NOT_YET)


def test_console_matching() -> None:
    assert console_matches(["a ... c", "...", "z"], ["a b c", "x", "y", "z"])
    assert console_matches(["..."], [])
    assert not console_matches(["a"], ["b"])
    assert not console_matches(["a"], ["a", "extra"])


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE)
def test_the_samples_of_a_page_run(page: str, tmp_path: Path) -> None:
    todo = [(b.kind, b.code, b.line, b.path) for b in blocks(page) if b.kind != "excerpt"]
    plan = tmp_path / "blocks.json"
    plan.write_text(json.dumps([page, todo]), encoding="utf-8")
    where = tmp_path / "page"
    where.mkdir()
    done = subprocess.run(
        [sys.executable, str(CHILD), str(plan)],
        cwd=where,
        env=_env(where),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = sorted(b.path for b in blocks(page) if b.kind == "test")
    if tests:
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist", "-W", "error", *tests],
            cwd=where,
            env=_env(where),
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        passed = set(re.findall(r"^(test_\S+\.py)::\S+ PASSED", ran.stdout, re.M))
        assert passed == set(tests), ran.stdout + ran.stderr


EXCERPTS: Final = [(page, b) for page in pages() for b in blocks(page) if b.kind == "excerpt"]


@pytest.mark.parametrize(("page", "block"), EXCERPTS, ids=[f"{p}:{b.line}" for p, b in EXCERPTS])
def test_an_excerpt_is_the_tested_file(page: str, block: Block) -> None:
    """An excerpt's lines appear in its examples/ file in order ("..." lines and the naming comment aside)."""
    source = (REPO / block.path).read_text(encoding="utf-8").splitlines()
    at = 0
    for line in block.code.splitlines()[1:]:
        if not line.strip() or line.strip() in ("...", "# ..."):
            continue
        found = next((i for i in range(at, len(source)) if source[i].rstrip() == line.rstrip()), None)
        assert found is not None, f"{page}:{block.line}: not in {block.path} (in order): {line!r}"
        at = found + 1
