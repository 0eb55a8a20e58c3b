"""What the command line imports at start-up (`persched jobs` within 0.25 s).

The time itself is measured by ``benchmarks/cli_startup.py`` (tests never
assert on timing); these tests pin down the imports that made it slow, so
that a gain cannot silently regress: Alembic is imported only when something
is migrated, and no engine's SQLAlchemy dialect is imported for another
engine's database. Each runs the real entry point under ``python -X
importtime`` and reads the modules it imported from stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 60.0  # seconds for one process
POSTGRESQL_DIALECT = "sqlalchemy.dialects.postgresql"
MYSQL_DIALECT = "sqlalchemy.dialects.mysql"  # nor the MySQL one (persched._store.schema's MySQL types)


def _imported(args: Sequence[str], cwd: Path) -> set[str]:
    """Run ``python -X importtime ARGS``; return the modules it imported."""
    env = {k: v for k, v in os.environ.items() if k != "PERSCHED_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    prefix = "import time:"
    lines = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) > 10, proc.stderr[-2000:]  # -X importtime did report
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}  # the first line is the header


def _under(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


# What `persched jobs`, `show` and `runs` do without: pydantic (plain rows), SQLAlchemy's ORM and
# asyncio extension, and the scheduler's machinery.
NOT_FOR_READING: Final = (
    "pydantic",
    "sqlalchemy.orm",
    "sqlalchemy.ext.asyncio",
    "persched._model.public_models",
    "persched._engine.scheduler",
    "persched._engine.dispatcher",
    "persched._engine.workers",
    "persched._engine.heartbeat",
)
READ_COMMANDS: Final = (["jobs"], ["show", "report"], ["runs"], ["runs", "report", "--limit", "5"])


@pytest.fixture
def at_head(tmp_path: Path) -> Path:
    """A SQLite file migrated to head, with one job."""
    path = tmp_path / "jobs.db"
    with JobScheduler(str(path)) as sched:
        sched.schedule("report", "os.path:join", 3600.0, args=["a", "b"])
    return path


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_read_commands_import_no_pydantic_orm_or_scheduler(at_head: Path, tmp_path: Path, command: list[str]) -> None:
    modules = _imported(["-m", "persched", "--db", str(at_head), *command], tmp_path)
    assert "persched._model.plain_models" in modules  # it did read rows
    assert not {m for package in NOT_FOR_READING for m in _under(modules, package)}


def test_json_dumps_the_public_models(at_head: Path, tmp_path: Path) -> None:
    # The other side of the test above: `--json` prints what pydantic dumps, so it imports it.
    assert _under(_imported(["-m", "persched", "--db", str(at_head), "jobs", "--json"], tmp_path), "pydantic")


def test_jobs_at_head_imports_no_alembic(at_head: Path, tmp_path: Path) -> None:
    modules = _imported(["-m", "persched", "--db", str(at_head), "jobs"], tmp_path)
    assert _under(modules, "persched._store")  # it did read the jobs
    assert not _under(modules, "alembic")


def test_sqlite_engine_and_schema_import_no_postgresql_dialect(at_head: Path, tmp_path: Path) -> None:
    # The partial indexes get their postgresql_where only with a PostgreSQL engine (_schema).
    probe = (
        "import sys; from persched._store import db as _db, revision as _revision, schema as _schema; "
        "e = _db.make_engine(sys.argv[1], create=False); assert _revision.at_head(e); "
        "assert _schema.runs.indexes and all(i.dialect_kwargs.get('sqlite_where') is not None "
        "for i in _schema.runs.indexes if i.name in _schema.partial_index_predicates()); e.dispose()"
    )
    modules = _imported(["-c", probe, str(at_head)], tmp_path)
    assert "sqlalchemy.dialects.sqlite" in modules
    assert not _under(modules, POSTGRESQL_DIALECT)
    assert not _under(modules, MYSQL_DIALECT)
    assert not _under(modules, "alembic")


def test_jobs_at_head_imports_no_postgresql_dialect(at_head: Path, tmp_path: Path) -> None:
    modules = _imported(["-m", "persched", "--db", str(at_head), "jobs"], tmp_path)
    assert not _under(modules, POSTGRESQL_DIALECT)
    assert not _under(modules, MYSQL_DIALECT)


def test_migrate_imports_alembic_only_to_migrate(tmp_path: Path) -> None:
    db = str(tmp_path / "new.db")
    assert _under(_imported(["-m", "persched", "--db", db, "migrate"], tmp_path), "alembic")
    assert not _under(_imported(["-m", "persched", "--db", db, "migrate"], tmp_path), "alembic")  # at head


def test_scheduler_start_at_head_imports_no_alembic(at_head: Path, tmp_path: Path) -> None:
    probe = (
        "import sys; from persched import JobScheduler; "
        "s = JobScheduler(sys.argv[1]); s.start(); assert s.jobs(); s.shutdown(wait=True)"
    )
    assert not _under(_imported(["-c", probe, str(at_head)], tmp_path), "alembic")
