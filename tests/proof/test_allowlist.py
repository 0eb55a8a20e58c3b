"""Security of the store: allowed_modules, and no pickle / eval / exec path in persched.

Whoever can write the database can change a row's ``target``. With
``allowed_modules`` set, a target outside it is refused at schedule() and,
for a row changed by SQL, its run is recorded as an error without importing
the module; the other jobs go on.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import sys
import tokenize
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import persched
from persched.errors import InvalidJobError
from tests.support.helpers import sql, wait_until

if TYPE_CHECKING:
    from tests.conftest import SchedulerFactory

SIDE_EFFECT = "tests.proof.side_effect_module"
DANGEROUS = ["os:system", "subprocess:run", "builtins:eval", f"{SIDE_EFFECT}:target"]
ALLOWED = ["tests.support"]


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "imported.marker"
    monkeypatch.setenv("PERSCHED_PROOF_MARKER", str(path))
    sys.modules.pop(SIDE_EFFECT, None)
    return path


@pytest.mark.parametrize("target", DANGEROUS)
def test_schedule_refuses_a_target_outside_allowed_modules(
    make_scheduler: SchedulerFactory, marker: Path, target: str
) -> None:
    from persched import JobScheduler

    sched = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, allowed_modules=ALLOWED)
    make_scheduler.created.append(sched)
    with pytest.raises(InvalidJobError) as info:
        sched.schedule("evil", target, 1.0, args=["touch /tmp/pwned"])
    assert info.value.argument == "fn"
    assert sched.jobs() == []
    assert SIDE_EFFECT not in sys.modules
    assert not marker.exists(), "the module was imported"


@pytest.mark.parametrize("target", DANGEROUS)
def test_a_row_changed_by_sql_is_refused_at_run_time(
    make_scheduler: SchedulerFactory, marker: Path, target: str, tmp_path: Path
) -> None:
    from persched import JobScheduler

    sched = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, allowed_modules=ALLOWED)
    make_scheduler.created.append(sched)
    sched.schedule("victim", "tests.support.proof_jobs:noop", 1.0)
    sched.schedule("bystander", "tests.support.jobs:record", 1.0, args=["bystander"])
    pwned = tmp_path / "pwned"
    sql(
        make_scheduler.url,
        "UPDATE persched_jobs SET target=?, args=? WHERE job_id='victim'",
        (target, f'["touch {pwned}"]'),
    )
    sched.start()
    make_scheduler.clock.advance(1.0)

    def finished(job_id: str) -> list[tuple[str, str | None]]:
        return sql(
            make_scheduler.url,
            "SELECT outcome, error FROM persched_runs WHERE job_id=? AND outcome IS NOT NULL",
            (job_id,),
        )

    wait_until(lambda: bool(finished("victim")) and bool(finished("bystander")), message="both ran")
    (outcome, error), *_ = finished("victim")
    assert outcome == "error"
    assert error is not None
    assert error.startswith("TargetRefused"), error
    assert finished("bystander")[0][0] == "ok", "the other jobs go on"
    assert SIDE_EFFECT not in sys.modules
    assert not marker.exists(), "the module was imported"
    assert not pwned.exists()
    make_scheduler.clock.advance(1.0)  # the refused job keeps its schedule, the bystander keeps running
    wait_until(lambda: len(finished("bystander")) >= 2 and len(finished("victim")) >= 2, message="second round")


def test_the_side_effect_module_really_has_a_side_effect(marker: Path) -> None:
    """Non-vacuity: importing it does write the marker, so its absence above means something."""
    import importlib

    importlib.import_module(SIDE_EFFECT)
    assert marker.exists()
    sys.modules.pop(SIDE_EFFECT, None)


FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "copyreg"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def _code_tokens(source: str) -> list[tokenize.TokenInfo]:
    """NAME and OP tokens only: comments and strings (docstrings saying 'never pickle') are not code."""
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type in (tokenize.NAME, tokenize.OP)]


def test_persched_source_has_no_pickle_eval_or_exec_path() -> None:
    root = Path(persched.__file__).parent
    found: list[str] = []
    files = sorted(root.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        source = path.read_text()
        tokens = _code_tokens(source)
        for i, t in enumerate(tokens):
            if t.string in FORBIDDEN_MODULES:
                found.append(f"{path.name}:{t.start[0]}: {t.string}")
            nxt = tokens[i + 1].string if i + 1 < len(tokens) else ""
            prev = tokens[i - 1].string if i > 0 else ""
            if t.string in FORBIDDEN_CALLS and nxt == "(" and prev not in ("def", "."):
                found.append(f"{path.name}:{t.start[0]}: {t.string}(")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found += [
                    f"{path.name}:{node.lineno}: import {a.name}" for a in node.names if a.name in FORBIDDEN_MODULES
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "") in FORBIDDEN_MODULES:
                found.append(f"{path.name}:{node.lineno}: from {node.module}")
    assert found == [], found


def test_the_source_scan_can_fail(tmp_path: Path) -> None:
    """Non-vacuity: the scan flags the forms it looks for, and ignores them in strings and comments."""
    bad = "import pickle\nx = eval('1')\n"
    names = {t.string for t in _code_tokens(bad)}
    assert "pickle" in names
    assert "eval" in names
    assert {t.string for t in _code_tokens('"""never pickle"""\n# eval(x)\n')} == set()


# An allowed callable is *defined* in an allowed module. These all start in
# one (tests.support.allow_bridge) and reach a callable of another module.
BRIDGE = "tests.support.allow_bridge"
REACHED = [
    f"{BRIDGE}:touch",  # `from tests.proof.foreign_calls import touch`
    f"{BRIDGE}:foreign_calls.touch",  # through an imported module
    f"{BRIDGE}:os.system",
    f"{BRIDGE}:threading.os.system",
]


def _marker_args(target: str, path: Path) -> list[str]:
    return [f"touch {path}"] if target.endswith("system") else [str(path)]


@pytest.mark.parametrize("target", REACHED)
def test_schedule_refuses_a_callable_reached_through_an_allowed_module(
    make_scheduler: SchedulerFactory, target: str, tmp_path: Path
) -> None:
    from persched import JobScheduler

    sched = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, allowed_modules=ALLOWED)
    make_scheduler.created.append(sched)
    with pytest.raises(InvalidJobError, match="allowed_modules") as info:
        sched.schedule("evil", target, 1.0, args=_marker_args(target, tmp_path / "pwned"))
    assert info.value.argument == "fn"
    assert sched.jobs() == []
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("target", REACHED)
def test_a_row_reaching_another_module_is_never_called(
    make_scheduler: SchedulerFactory, target: str, tmp_path: Path
) -> None:
    from persched import JobScheduler

    sched = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, allowed_modules=ALLOWED)
    make_scheduler.created.append(sched)
    pwned, own = tmp_path / "pwned", tmp_path / "own"
    sched.schedule("victim", f"{BRIDGE}:own", 1.0, args=[str(pwned)])
    sched.schedule("bystander", f"{BRIDGE}:own", 1.0, args=[str(own)])
    sql(
        make_scheduler.url,
        "UPDATE persched_jobs SET target=?, args=? WHERE job_id='victim'",
        (target, json.dumps(_marker_args(target, pwned))),
    )
    sched.start()
    make_scheduler.clock.advance(1.0)
    wait_until(lambda: len(sched.runs("victim")) == 1 and own.exists(), message="both came due")
    wait_until(lambda: sched.runs("victim")[0].outcome is not None, message="the victim's run finished")
    (run,) = sched.runs("victim")
    assert run.outcome == "error"
    assert run.error is not None
    assert run.error.startswith("TargetRefused"), run.error
    assert not pwned.exists(), "the foreign callable was called"


def test_without_allowed_modules_the_bridge_does_call(make_scheduler: SchedulerFactory, tmp_path: Path) -> None:
    """Non-vacuity: the references above do reach a callable that leaves the marker."""
    sched = make_scheduler(start=True)
    pwned = tmp_path / "pwned"
    sched.schedule("open", f"{BRIDGE}:touch", 1.0, args=[str(pwned)])
    make_scheduler.clock.advance(1.0)
    wait_until(pwned.exists, message="the callable ran")


def test_cli_run_allows_only_the_imported_package_by_default() -> None:
    from persched.cli.parser import build_parser
    from persched.cli.service import run_allowed_modules

    parser = build_parser()
    assert run_allowed_modules(parser.parse_args(["run", "--import", "myapp.schedules"])) == ["myapp"]
    assert run_allowed_modules(
        parser.parse_args(["run", "--import", "myapp.schedules", "--allow", "shared.tasks", "--allow", "x"])
    ) == ["myapp", "shared.tasks", "x"]
    assert run_allowed_modules(parser.parse_args(["run", "--import", "myapp", "--allow-any-module"])) is None


def test_a_callable_with_a_unicode_name_defined_in_an_allowed_module_runs(
    make_scheduler: SchedulerFactory, tmp_path: Path
) -> None:
    """References are dotted identifiers, Unicode ones too (the check is not ASCII-only)."""
    from persched import JobScheduler
    from tests.support import allow_bridge

    sched = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, allowed_modules=ALLOWED)
    make_scheduler.created.append(sched)
    done = tmp_path / "done"
    job = sched.schedule("unicode", allow_bridge.grüße, 1.0, args=[str(done)])
    assert job.target == f"{BRIDGE}:grüße"
    assert sched.schedule("unicode-ref", f"{BRIDGE}:grüße", 1.0, args=[str(done)]).target == job.target
    sched.start()
    make_scheduler.clock.advance(1.0)
    wait_until(done.exists, message="the job ran")


def test_cli_run_passes_the_allow_list_to_its_scheduler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from persched import cli
    from persched.errors import SchedulerStateError

    made: list[dict[str, object]] = []

    class Recorder:
        def __init__(self, url: str, **options: object) -> None:
            made.append(options)

        def start(self) -> None:
            raise SchedulerStateError("stop here: only the options are checked")

        def shutdown(self, wait: bool = True) -> None:
            pass

    from persched._engine import scheduler as _scheduler

    monkeypatch.setattr(_scheduler, "JobScheduler", Recorder)  # `run` imports it from there when it starts
    db = str(tmp_path / "run.db")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:  # main() configures the root logger, as the command does
        assert cli.main(["--db", db, "run", "--import", "tests.support.cli_jobs"]) == 1
        assert cli.main(["--db", db, "run", "--import", "tests.support.cli_jobs", "--allow", "other"]) == 1
        assert cli.main(["--db", db, "run", "--import", "tests.support.cli_jobs", "--allow-any-module"]) == 1
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)
    assert [m["allowed_modules"] for m in made] == [["tests"], ["tests", "other"], None]
