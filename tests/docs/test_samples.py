"""Every sample of README.md and docs/ runs, as tests/docs/samples.py describes; each page in a directory of its own."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from persched import JobScheduler
from tests.docs.samples import NOT_YET, REPO, Block, blocks, console_matches, output_comments, pages, prints_shown
from tests.support.helpers import sql

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


def _section(page: str, heading: str) -> list[Block]:
    """The snippets of `page` under the ``## ...`` heading that starts with `heading`."""
    text = (REPO / page).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    first, last = text.count("\n", 0, start) + 1, text.count("\n", 0, end if end >= 0 else len(text)) + 1
    return [b for b in blocks(page) if b.kind == "snippet" and first <= b.line <= last]


def test_the_first_job_tutorial_reads_and_steers_without_running_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its "look at the runs" and "stop a job" snippets use a scheduler that is not started: they run
    nothing, not even the job that is overdue (the one being descheduled included)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.py").write_text("def send_report(to): pass\ndef flaky(): raise ValueError('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sched = JobScheduler("jobs.db")
    sched.schedule("report", "tasks:send_report", 1.0, kwargs={"to": "ops"}, start_in=0)
    sched.schedule("flaky", "tasks:flaky", 1.0, start_in=0)
    sched.shutdown()
    snippets = _section("docs/tutorials/first-job.md", "4.") + _section("docs/tutorials/first-job.md", "5.")
    assert len(snippets) == 2
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in snippets:
            exec(compile(block.code, f"first-job.md:{block.line}", "exec"), namespace)
    assert sql("sqlite:///jobs.db", "SELECT job_id FROM persched_runs") == []


def test_output_comments_are_read_from_print_calls() -> None:
    code = (
        "print(1, 2)  # 1 2\n"
        "x = 3  # not output\n"
        "for i in range(2):\n"
        "    print(i)\n"
        "    # 0\n"
        "    # 1\n"
        "print(\n    x,\n)  # 3\n"
    )
    assert output_comments(code) == ["1 2", "0", "1", "3"]
    assert prints_shown(["1 2", "0", "...3"], ["worker says hi", "1 2", "0", "1", "x=3"])
    assert not prints_shown(["1 5 every 1 s"], ["1 9 every 1 s"])
    assert not prints_shown(["b", "a"], ["a", "b"])  # in order


def test_the_readme_hides_nothing_from_a_reader_at_a_terminal() -> None:
    """No HTML comment (a terminal shows it): the README's set-up comes from its file under tests/docs."""
    assert "<!--" not in (REPO / "README.md").read_text(encoding="utf-8")
    readme = blocks("README.md")
    assert (readme[0].kind, readme[0].path, readme[-1].kind) == ("setup", "tests/docs/setup/README.py", "teardown")


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
