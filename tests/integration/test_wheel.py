"""The built wheel works outside the source tree (it finds its migrations).

A wheel is built from a copy of the repository, installed into a fresh venv
in tmp_path, and exercised from a directory outside the repository so that
nothing can be imported from the source tree. Dependencies come from the
running environment through a ``.pth`` line (so the test needs no network);
the venv's own site-packages comes first on ``sys.path``, and the child
asserts that ``persched`` was imported from there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import site
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import persched
from persched._store.migrate import HEAD
from persched._store.schema import metadata

# One worker builds the wheel for all three tests (module-scoped fixtures are per worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300.0  # seconds; a wheel build can be slow on a loaded CI box

_IGNORE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".venv", "venv")


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _can_build_offline() -> bool:
    # --no-build-isolation needs setuptools (>=64) and, before setuptools 70.1,
    # the `wheel` package in this environment.
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(p) for p in version.split(".")[:2])
    if (major, minor) < (64, 0):
        return False
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from a copy of the repo (the repo itself stays clean)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(REPO, src, ignore=_IGNORE)
    out = base / "dist"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        str(out),
        str(src),
    ]
    if _can_build_offline():
        cmd.insert(4, "--no-build-isolation")
    _run(cmd, cwd=base)
    (built,) = out.glob("persched-*.whl")
    return built


@pytest.fixture(scope="module")
def venv_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; dependencies from this environment."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv.parent)
    bindir = "Scripts" if sys.platform == "win32" else "bin"
    python = venv / bindir / ("python.exe" if sys.platform == "win32" else "python")
    purelib = Path(
        _run(
            [
                str(python),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            cwd=venv,
        ).stdout.strip()
    )
    # Install with this environment's pip into the venv's interpreter.
    _run(
        [
            sys.executable, "-m", "pip", "--python", str(python),
            "install", "--no-deps", "--no-index", "-q", str(wheel),
        ],
        cwd=venv,
    )  # fmt: skip
    # Dependencies (sqlalchemy, alembic, pydantic) from the running environment,
    # appended after the venv's own site-packages.
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    here.update(site.getsitepackages())
    (purelib / "_persched_test_deps.pth").write_text("\n".join(sorted(here)) + "\n", encoding="utf-8")
    return python


def test_wheel_contains_migrations_and_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(metadata_name).decode()
        entry_points = zf.read(metadata_name.replace("METADATA", "entry_points.txt")).decode()
    for required in [
        "persched/_migrations/__init__.py",
        "persched/_migrations/env.py",
        "persched/_migrations/script.py.mako",
        "persched/_migrations/versions/__init__.py",
        "persched/_migrations/versions/0001_initial.py",
        "persched/_store/db.py",
        "persched/_store/migrate.py",
    ]:
        assert required in names, required
    # pyproject.toml names every package one by one: a new package left out of that list is missing here.
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "persched").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    if (REPO / "persched" / "py.typed").exists():
        assert "persched/py.typed" in names
    assert not any(n.startswith(("tests/", "migrations/")) for n in names)
    for dep in ["sqlalchemy", "alembic", "pydantic"]:
        assert f"Requires-Dist: {dep}" in metadata
    assert "persched = persched.cli:main" in entry_points
    # The version is written once, as persched.__version__; the wheel's metadata is read from it.
    assert f"\nVersion: {persched.__version__}\n" in metadata
    assert wheel.name.startswith(f"persched-{persched.__version__}-")


def test_installed_wheel_migrates_outside_the_repo(venv_python: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = (
        "import persched, sqlalchemy\n"
        "from persched._store import migrate as _migrate, db as _db\n"
        "assert 'site-packages' in persched.__file__, persched.__file__\n"
        f"assert _migrate.HEAD == {HEAD!r}, _migrate.HEAD\n"
        "e = _db.make_engine('x.db')\n"
        "_migrate.upgrade(e)\n"
        "print(sorted(sqlalchemy.inspect(e).get_table_names()))\n"
        "print(persched.__file__)\n"
        "e.dispose()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [str(venv_python), "-I", "-c", script],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    tables, location = proc.stdout.splitlines()[:2]
    assert tables == str(sorted(["persched_alembic_version", *(t.name for t in metadata.sorted_tables)]))
    assert Path(location).resolve().is_relative_to(venv_python.parent.parent.resolve())
    assert stat.S_IMODE(os.stat(work / "x.db").st_mode) == 0o600


def test_installed_cli_migrates_outside_the_repo(venv_python: Path, tmp_path: Path) -> None:
    # The console script of the installed wheel, outside the repo.
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("PERSCHED_DB", None)
    script = venv_python.parent / ("persched.exe" if sys.platform == "win32" else "persched")
    assert script.exists(), "the wheel did not install the `persched` console script"
    proc = subprocess.run(
        [str(script), "--db", "cli.db", "migrate"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(work / "cli.db").st_mode) == 0o600
    conn = sqlite3.connect(work / "cli.db")
    try:
        row = conn.execute("SELECT version_num FROM persched_alembic_version").fetchone()
    finally:
        conn.close()
    assert row == (HEAD,)
