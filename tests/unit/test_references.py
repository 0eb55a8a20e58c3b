"""Every reference in the text of the code can be followed by a reader of the repository.

Two checks, read from the files without a database:

- no comment, docstring or string of the code (persched/, tests/,
  benchmarks/, migrations/, examples/), and no page of their Markdown, of
  docs/, README.md or CONTRIBUTING.md, cites a document or a tracker the
  repository does not hold (the contract a reader has is
  docs/reference/behaviour.md: cite a page and its heading, or a test);
  CHANGELOG.md keeps its history;
- every backticked ``persched.…`` dotted name in a docstring under persched/
  and in a documentation page (docs/, README.md) names a module or an
  attribute that exists: the module is imported and the rest looked up with
  `getattr`. A documented logger name (`persched._loggers`) and a file name
  (``persched.db``) are not dotted names of the code.

The patterns below are built from pieces, so that this file does not match them.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Final

import pytest

from persched import _loggers

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

# Documents outside the repository, and tracker numbers: the history belongs in git and CHANGELOG.md.
_UNFOLLOWABLE = re.compile(
    "|".join(
        (
            r"\b" + "SP" + r"EC\b",
            r"\b" + "STY" + r"LE\b",
            r"\b" + "FIELD" + r"-REPORTS\b",
            r"(?i:\b" + "iss" + r"ue\s+#?\d+)",
        )
    )
)
# Where the code and its pages are read for such citations.
_CODE_FOLDERS: Final = ("persched", "tests", "benchmarks", "migrations", "examples")
_PAGES: Final = ("README.md", "CONTRIBUTING.md")
_DOTTED = re.compile(r"`(persched(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")
_FILE_NAME = re.compile(r"\.(?:db|py|md|toml|ini|cfg|txt|json|sqlite3?|localhost)$")  # and host names
_FRAMEWORK_MODULES = ("persched.integrations.django.",)
_SHIPPED = "persched._migrations"
_LOGGER_NAMES = frozenset(value for name, value in vars(_loggers).items() if name.isupper() and isinstance(value, str))


def _python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py") if path.resolve() != THIS)


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def citing_files(root: Path = ROOT) -> list[Path]:
    """The files whose text may cite only what the repository holds (module docstring)."""
    code = [path for folder in _CODE_FOLDERS for suffix in ("*.py", "*.md") for path in (root / folder).rglob(suffix)]
    pages = [root / name for name in _PAGES if (root / name).is_file()]
    return sorted(path for path in [*code, *pages, *(root / "docs").rglob("*.md")] if path.resolve() != THIS)


def unfollowable(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`path:line: text` of each line that cites what the repository does not hold."""
    hits = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _UNFOLLOWABLE.search(line):
                hits.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return hits


def docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the module's docstring and of each class's and function's."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                found.append((node.body[0].lineno, text))
    return found


def resolves(dotted: str) -> bool:
    """Whether `dotted` is a module, or a module's attribute (of an attribute ...)."""
    if dotted.startswith(_SHIPPED) and (ROOT / "migrations").is_dir():
        return True  # the wheel's name for the checkout's migrations/ (absent from a source tree)
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = ".".join(parts[:split])
        try:
            value: object = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] != "persched":
                return True  # a module of an extra that is not installed here: not this test's to judge
            continue
        except Exception:
            if module.startswith(_FRAMEWORK_MODULES):
                return True  # a framework's module that needs the framework set up (Django's settings)
            raise
        try:
            for attribute in parts[split:]:
                value = getattr(value, attribute)
        except AttributeError:
            return False
        return True
    return False


def unresolved(texts: list[tuple[str, str]]) -> list[str]:
    """`where: name` of each backticked persched name in `texts` (where, text) that names nothing."""
    return [
        f"{where}: {name}"
        for where, text in texts
        for name in _DOTTED.findall(text)
        if name not in _LOGGER_NAMES and not _FILE_NAME.search(name) and not resolves(name)
    ]


def test_no_citation_of_what_the_repository_does_not_hold() -> None:
    hits = unfollowable(citing_files())
    assert not hits, f"{len(hits)} citations a reader cannot follow:\n" + "\n".join(hits)


def test_backticked_names_in_docstrings_resolve() -> None:
    texts = [
        (f"{path.relative_to(ROOT)}:{line}", text)
        for path in _python_files("persched")
        for line, text in docstrings(path)
    ]
    missing = unresolved(texts)
    assert not missing, f"{len(missing)} names in docstrings that name nothing:\n" + "\n".join(missing)


def test_backticked_names_in_docs_resolve() -> None:
    missing = unresolved([(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")) for page in _doc_pages()])
    assert not missing, f"{len(missing)} names in the docs that name nothing:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("line", "cites"),
    [
        ("# reserve before the claim: " + "SP" + "EC §2", True),
        ("# see " + "SP" + "EC-multi", True),
        ("# " + "FIELD" + "-REPORTS #4", True),
        ("# (" + "Iss" + "ue 14: measured)", True),
        ("# " + "STY" + "LE §1", True),
        ("# docs/reference/behaviour.md, 'Forks'", False),
        ("specs = [JobSpec(...)]  # the style of the page", False),
    ],
)
def test_the_citation_pattern(line: str, cites: bool) -> None:
    assert bool(_UNFOLLOWABLE.search(line)) is cites


def test_a_citation_is_found_in_every_folder_read(tmp_path: Path) -> None:
    places = [
        "persched/m.py",
        "tests/t.py",
        "benchmarks/b.py",
        "benchmarks/README.md",
        "migrations/versions/0099_x.py",
        "examples/e.py",
        "docs/how-to/page.md",
        "README.md",
        "CONTRIBUTING.md",
    ]
    for place in places:
        (tmp_path / place).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / place).write_text("ok\n# reserve before the claim: " + "SP" + "EC §2\n", encoding="utf-8")
    (tmp_path / "CHANGELOG.md").write_text("- (" + "iss" + "ue 4) history\n", encoding="utf-8")
    hits = unfollowable(citing_files(tmp_path), tmp_path)
    assert sorted(hit.split(":")[0] for hit in hits) == sorted(places)
    assert all(hit.split(":")[1] == "2" for hit in hits)


def test_the_name_check() -> None:
    assert resolves("persched._engine.horizon.Horizon.refill")
    assert resolves("persched.testing")
    assert not resolves("persched._engine.horizon.Horizon.no_such_method")
    assert not resolves("persched._models")
