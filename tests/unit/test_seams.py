"""No module outside the engine reads a `JobScheduler`'s private attributes: it goes through the named seam.

The async front end and the metrics get what they need of a scheduler from
`persched._engine.scheduler.internals_of` (docs/architecture.md). This test
reads, with `ast`, the private attributes that `JobScheduler` sets on itself,
then every module outside persched/_engine/, and fails on an access to one of
those names on anything but ``self``: ``scheduler._store`` is a reach-in,
``self._store`` of a class of the module's own is not.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from tests.unit.test_layering import PACKAGE, copy_of_package, module_name

if TYPE_CHECKING:
    from pathlib import Path


def scheduler_privates(root: Path = PACKAGE) -> set[str]:
    """The private attributes that `JobScheduler` assigns on ``self``."""
    tree = ast.parse((root / "_engine" / "scheduler.py").read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "JobScheduler"]
    return {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
    }


def reach_ins(root: Path = PACKAGE) -> set[tuple[str, str]]:
    """(module, expression) of every read of a scheduler's private attribute outside the engine."""
    privates = scheduler_privates(root)
    found = set()
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "_engine":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in privates
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.add((module_name(path, root), ast.unparse(node)))
    return found


def test_the_schedulers_privates_are_read() -> None:
    """The reader finds the attributes (a reader that found none would pass every check)."""
    assert {"_store", "_timebase", "_dispatcher", "_config"} <= scheduler_privates()


def test_nothing_outside_the_engine_reaches_into_a_scheduler() -> None:
    assert not sorted(reach_ins()), "use persched._engine.scheduler.internals_of instead"


def test_a_reach_in_is_found(tmp_path: Path) -> None:
    root = copy_of_package(tmp_path)
    metrics = root / "metrics.py"
    metrics.write_text(
        metrics.read_text(encoding="utf-8") + "\ndef _f(scheduler: JobScheduler) -> object:\n"
        "    return scheduler._timebase.now()\n",
        encoding="utf-8",
    )
    assert reach_ins(root) == {("persched.metrics", "scheduler._timebase")}
