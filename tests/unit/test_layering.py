"""The import layering of persched/ (docs/architecture.md): every arrow points down, every module has a layer.

Each module's imports are read with `ast` from its source, nothing is
imported: module-level imports, imports inside functions (deferred, but a
dependency all the same) and imports under ``if TYPE_CHECKING:`` (a type the
module names is a dependency of its design) all count. ``from persched._store
import db`` is an arrow to ``persched._store.db``; the ``__init__`` of a package
that an import passes through is not an arrow (persched's and the private
folders' are empty or lazy). The layers, lowest first, are `LAYERS`; a module
may import its own layer and those below. A new module must be placed: one
that no entry of `LAYERS` covers fails `test_every_module_has_a_layer`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "persched"

# Lowest first: (layer, the modules it holds: a name, or a folder's name ending in ".*").
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("persched.errors", "persched.clock", "persched._realtime", "persched._loggers")),
    ("model", ("persched._model", "persched._model.*")),
    ("store", ("persched._store", "persched._store.*")),
    ("engine", ("persched._engine", "persched._engine.*")),
    ("interfaces", ("persched._interfaces", "persched._interfaces.*")),
    (
        "public",
        (
            "persched",
            "persched.__main__",
            "persched.cli",
            "persched.cli.*",
            "persched.integrations",
            "persched.integrations.*",
            "persched.metrics",
            "persched.testing",
            "persched.web",
        ),
    ),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module under `root`, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imports_of(name: str, source: str, known: set[str]) -> set[str]:
    """The persched modules that module `name` imports (`known`: the names that are modules)."""
    is_package = name in known and any(other.startswith(name + ".") for other in known)
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "persched")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "persched":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    found.discard(name)
    return found


def layer_of(name: str) -> int | None:
    """The index in `LAYERS` of module `name`, or None when no entry covers it."""
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if name == member or (member.endswith(".*") and name.startswith(member[:-1])):
                return index
    return None


def back_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The arrows of `graph` (module -> the modules it imports) that run to a higher layer."""
    edges = set()
    for source, targets in graph.items():
        low = layer_of(source)
        for target in targets:
            high = layer_of(target)
            if low is not None and high is not None and high > low:
                edges.add((source, target))
    return edges


def graph_of(root: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(root)
    known = set(found)
    return {name: imports_of(name, path.read_text(encoding="utf-8"), known) for name, path in found.items()}


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(name for name in modules() if layer_of(name) is None)
    assert not unplaced, f"place these modules in a layer (LAYERS, docs/architecture.md): {unplaced}"


def test_no_arrow_runs_back_up() -> None:
    edges = sorted(back_edges(graph_of()))
    assert not edges, "imports from a lower layer to a higher one: " + ", ".join(f"{a} -> {b}" for a, b in edges)


def test_the_graph_is_read() -> None:
    """The reader finds what the code imports (a reader that found nothing would pass every check)."""
    graph = graph_of()
    assert "persched._model.instant" in graph["persched._store.claims"]
    assert "persched._store.db" in graph["persched._engine.scheduler"]  # `from .._store import db as _db`
    assert "persched._realtime" in graph["persched.clock"]  # `from . import _realtime`
    assert "persched._model.public_models" in graph["persched._model.models"]  # a function-level import


def copy_of_package(tmp_path: Path) -> Path:
    """A copy of persched/'s modules under `tmp_path`, for a test to add an import to."""
    root = tmp_path / "persched"
    for path in modules().values():
        copy = root / path.relative_to(PACKAGE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return root


def outside_the_foundation(graph: dict[str, set[str]], folder: str) -> set[tuple[str, str]]:
    """The arrows from the modules of `folder` to modules outside it and above the foundation."""
    return {
        (source, target)
        for source, targets in graph.items()
        if source == folder or source.startswith(folder + ".")
        for target in targets
        if not (target == folder or target.startswith(folder + ".")) and layer_of(target) != 0
    }


def test_the_http_server_stands_on_the_foundation_alone() -> None:
    """The server that the dashboard and the metrics share imports neither of them (docs/architecture.md)."""
    graph = graph_of()
    assert "persched._interfaces.http.server" in graph
    assert not outside_the_foundation(graph, "persched._interfaces.http")


def test_an_arrow_out_of_the_http_server_is_found(tmp_path: Path) -> None:
    root = copy_of_package(tmp_path)
    changed = root / "_interfaces" / "http" / "hosts.py"
    changed.write_text(changed.read_text(encoding="utf-8") + "\nfrom ..dashboard import app\n", encoding="utf-8")
    found = outside_the_foundation(graph_of(root), "persched._interfaces.http")
    assert found == {("persched._interfaces.http.hosts", "persched._interfaces.dashboard.app")}


@pytest.mark.parametrize(
    ("source", "line", "target"),
    [
        ("_model/instant.py", "from .._engine import scheduler\n", "persched._engine.scheduler"),  # a module by name
        (
            "_store/leases.py",
            "def f() -> None:\n    from persched._interfaces.present import iso\n",
            "persched._interfaces.present",
        ),
        (
            "errors.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._model.models import Job\n",
            "persched._model.models",
        ),
        ("_engine/runs.py", "import persched.metrics\n", "persched.metrics"),  # public, above the engine
        ("_interfaces/demo.py", "from .. import current_run\n", "persched"),  # the facade, from below it
    ],
)
def test_a_back_edge_fails(tmp_path: Path, source: str, line: str, target: str) -> None:
    """A copy of the package with one upward import added: the check finds exactly that arrow."""
    root = copy_of_package(tmp_path)
    changed = root / source
    changed.write_text(changed.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
    assert back_edges(graph_of(root)) == back_edges(graph_of()) | {(module_name(changed, root), target)}


def test_an_unplaced_module_is_found(tmp_path: Path) -> None:
    root = tmp_path / "persched"
    (root / "_engine").mkdir(parents=True)
    for name in ("__init__.py", "errors.py", "_engine/__init__.py", "_engine/runs.py", "_helpers.py"):
        (root / name).write_text("", encoding="utf-8")
    assert sorted(name for name in modules(root) if layer_of(name) is None) == ["persched._helpers"]
