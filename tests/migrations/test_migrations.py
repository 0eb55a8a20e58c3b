"""Alembic revisions versus persched/_store/schema.py, and the upgrade protocol.

Every test runs on SQLite and (with PERSCHED_TEST_PG_URL) on PostgreSQL, on an
empty database from ``empty_db_url``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING, Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    UniqueConstraint,
    column,
    inspect,
    select,
    table,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.schema import CreateIndex

from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store import revision as _revision
from persched._store.schema import (
    MYSQL_SLOT_COLUMN,
    MYSQL_SLOT_EXPRESSION,
    PARTIAL_INDEX_DIALECTS,
    metadata,
    partial_index_predicates,
    runs,
)
from persched.errors import SchemaVersionError, StoreError
from tests.support.engines import engine_named

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sqlalchemy.engine import Engine

TIMEOUT = 60.0  # seconds; bounds every blocking call
_VERSION = table(_migrate.VERSION_TABLE, column("version_num"))


@pytest.fixture
def engine(empty_db_url: str) -> Iterator[Engine]:
    """An engine on the empty database, disposed afterwards."""
    eng = _db.make_engine(empty_db_url)
    yield eng
    eng.dispose()


def _include(obj: object, name: str | None, type_: str, *_: object) -> bool:
    # The version table is Alembic's, not part of persched's metadata.
    return not (type_ == "table" and name == _migrate.VERSION_TABLE)


def _include_mysql(obj: object, name: str | None, type_: str, *rest: object) -> bool:
    # MySQL/MariaDB: the slot index is over a generated column that only they have
    # (persched/_store/schema.py); test_mysql_slot_index checks both. The failed runs' index
    # is partial, which they cannot be: they have none (revision 0012).
    if (type_, name) in (
        ("column", MYSQL_SLOT_COLUMN),
        ("index", "uq_persched_runs_slot"),
        ("index", "ix_persched_runs_failed"),
    ):
        return False
    return _include(obj, name, type_, *rest)


def _diff(engine: Engine, target: MetaData) -> list[Any]:
    include = _include_mysql if _db.is_mysql(engine) else _include
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include})
        diff: list[Any] = compare_metadata(ctx, target)
        conn.rollback()
    return diff


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_one_head_and_head_constant() -> None:
    script = ScriptDirectory(_migrate.script_location())
    assert script.get_heads() == [_migrate.HEAD]
    assert _migrate.HEAD == "0017"
    # The read commands check the revision without Alembic (persched._store.revision).
    assert _revision.HEAD_REVISION == _migrate.HEAD


def test_revisions_do_not_import_persched() -> None:
    # A revision must keep working after the models move on.
    script = ScriptDirectory(_migrate.script_location())
    for rev in script.walk_revisions():
        assert rev.path is not None
        with open(rev.path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names] + [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ]
        assert not [m for m in imported if m.split(".")[0] == "persched"], rev.path


def test_empty_to_head_matches_schema_metadata(engine: Engine) -> None:
    assert _migrate.current_revision(engine) is None
    _migrate.upgrade(engine)
    assert _migrate.current_revision(engine) == _migrate.HEAD
    assert _tables(engine) == {
        "persched_jobs",
        "persched_runs",
        "persched_changes",
        "persched_instances",
        _migrate.VERSION_TABLE,
    }
    assert _diff(engine, metadata) == []
    # Names of indexes and unique constraints, spelled out in the revision,
    # must match the naming convention of the metadata.
    insp = inspect(engine)
    for tbl in metadata.sorted_tables:
        indexes = {
            i["name"]
            for i in insp.get_indexes(tbl.name)
            if "duplicates_constraint" not in i  # PostgreSQL's index behind a UNIQUE
        }
        partial_only = {"ix_persched_runs_failed"} if _db.is_mysql(engine) else set()  # not on MySQL (0012)
        assert indexes == {i.name for i in tbl.indexes} - partial_only, tbl.name
        unique_indexes = {i["name"] for i in insp.get_indexes(tbl.name) if i["unique"]}
        assert unique_indexes >= {i.name for i in tbl.indexes if i.unique}, tbl.name
        uniques = {u["name"] for u in insp.get_unique_constraints(tbl.name)}
        if _db.is_mysql(engine):  # MySQL reports each unique index as a unique constraint too
            uniques -= {i.name for i in tbl.indexes if i.unique}
        expected = {c.name for c in tbl.constraints if isinstance(c, UniqueConstraint)}
        assert uniques == expected, tbl.name
        assert insp.get_pk_constraint(tbl.name)["name"] in (None, f"pk_{tbl.name}")
    _migrate.check_at_head(engine)


@pytest.mark.mariadb
def test_mysql_slot_index(tmp_path: Path) -> None:
    # MySQL/MariaDB: one run per grid slot through a generated column that is NULL for run-now
    # rows; run-now runs may share a slot's instant, grid runs may not.
    with engine_named("mariadb").fresh(tmp_path, "slot") as url:
        engine = _db.make_engine(url)
        try:
            _check_mysql_slot_index(engine)
        finally:
            engine.dispose()


def _check_mysql_slot_index(engine: Engine) -> None:
    _migrate.upgrade(engine)
    insp = inspect(engine)
    (slot,) = [i for i in insp.get_indexes("persched_runs") if i["name"] == "uq_persched_runs_slot"]
    assert slot["unique"]
    assert slot["column_names"] == ["job_id", "generation", MYSQL_SLOT_COLUMN, "attempt"]
    (column_info,) = [c for c in insp.get_columns("persched_runs") if c["name"] == MYSQL_SLOT_COLUMN]
    computed = column_info.get("computed")
    assert computed is not None
    assert computed.get("persisted")
    shown = " ".join(str(computed["sqltext"]).replace("`", "").split()).lower()
    assert shown.strip("()") == MYSQL_SLOT_EXPRESSION.lower()
    insert = text(
        "INSERT INTO persched_runs (job_id, generation, scheduled_for, started_at, instance_id, run_now)"
        " VALUES ('j', 1, '2024-01-01 00:00:00.000001', '2024-01-01 00:00:00', 'i', :run_now)"
    )
    with engine.begin() as conn:
        conn.execute(insert, {"run_now": False})
        conn.execute(insert, {"run_now": True})
        conn.execute(insert, {"run_now": True})
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert, {"run_now": False})


def _loose(where: object) -> str | None:
    # PostgreSQL gives back "((outcome)::text <> 'ok'::text)" for "outcome != 'ok'", and
    # "(outcome)::text = ANY ((ARRAY['error'::character varying, ...])::text[])" for "outcome IN ('error', ...)".
    if where is None:
        return None
    sql = re.sub(r"::(character varying|\w+)(\[\])?", "", str(where))
    sql = re.sub(r"= any \(*array\[(.*?)\]", r"in \1", sql, flags=re.IGNORECASE)
    sql = sql.replace("(", "").replace(")", "").replace("!=", "<>")
    return " ".join(sql.lower().split())


def _metadata_where(index: object, engine: Engine) -> str | None:
    ddl = str(CreateIndex(index).compile(dialect=engine.dialect))  # type: ignore[arg-type]  # an Index
    return ddl.partition(" WHERE ")[2] or None


def test_partial_indexes_match_their_revisions(engine: Engine) -> None:
    # Alembic's comparison above ignores an index's WHERE; this compares it. The metadata's
    # predicates are attached by _db.make_engine (see _schema), so this also checks that.
    if _db.is_mysql(engine):
        pytest.skip("MySQL has no partial indexes; test_mysql_slot_index checks what replaces the unique one")
    _migrate.upgrade(engine)
    assert engine.dialect.name in PARTIAL_INDEX_DIALECTS
    key = f"{engine.dialect.name}_where"
    reflected = {i["name"]: i["dialect_options"].get(key) for i in inspect(engine).get_indexes(runs.name)}
    declared = {index.name: _metadata_where(index, engine) for index in runs.indexes}
    assert {name: _loose(w) for name, w in reflected.items()} == {name: _loose(w) for name, w in declared.items()}
    assert {name for name, where in declared.items() if where is not None} == set(partial_index_predicates())
    # The check can fail: an index without its predicate compiles without WHERE.
    bare = MetaData()
    runs.to_metadata(bare)
    copy = next(i for i in bare.tables[runs.name].indexes if i.name == "uq_persched_runs_slot")
    copy.dialect_options[engine.dialect.name]["where"] = None
    assert _metadata_where(copy, engine) is None


def test_comparison_can_fail(engine: Engine) -> None:
    # The check above must be able to fail: a metadata with an extra column
    # differs from the migrated database.
    _migrate.upgrade(engine)
    other = MetaData()
    for tbl in metadata.sorted_tables:
        tbl.to_metadata(other)
    other.tables["persched_jobs"].append_column(Column("extra", Integer))
    diff = _diff(engine, other)
    assert any(d[0] == "add_column" and d[3].name == "extra" for d in diff), diff


def test_the_job_states_view_comes_and_goes_with_its_revision(engine: Engine) -> None:
    """Revision 0008 creates persched_job_states (a view, so not in the metadata compared above) and its
    downgrade drops it, leaving the tables as 0007 made them."""
    from alembic import command

    _migrate.upgrade(engine)
    assert inspect(engine).get_view_names() == ["persched_job_states"]
    with engine.begin() as conn:
        command.downgrade(_migrate._config(conn), "0007")
    assert inspect(engine).get_view_names() == []
    assert "persched_jobs" in _tables(engine)
    _migrate.upgrade(engine)
    with engine.connect() as conn:
        columns = conn.execute(text("SELECT * FROM persched_job_states")).keys()
        conn.rollback()
    assert "state" in columns
    assert "next_run_at" in columns


def test_upgrade_is_idempotent(engine: Engine) -> None:
    _migrate.upgrade(engine)
    _migrate.upgrade(engine)
    _migrate.upgrade(engine)
    assert _migrate.current_revision(engine) == _migrate.HEAD
    with engine.connect() as conn:
        rows = conn.execute(select(_VERSION.c.version_num)).all()
        conn.rollback()
    assert [r[0] for r in rows] == [_migrate.HEAD]


def test_upgrade_keeps_data(engine: Engine) -> None:
    _migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO persched_jobs (job_id, target, args, kwargs, "
                "interval_seconds, first_run_at, next_run_at, generation, state, "
                "created_at, updated_at) VALUES ('j', 'm:f', '[]', '{}', 1.0, "
                ":t, :t, 1, 'scheduled', :t, :t)"
            ),
            {"t": "2024-01-01 00:00:00"},
        )
    _migrate.upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM persched_jobs")).scalar() == 1
        conn.rollback()


def test_future_revision_raises_schema_version_error(engine: Engine) -> None:
    _migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(update(_VERSION).values(version_num="9999"))
    with pytest.raises(SchemaVersionError) as info:
        _migrate.upgrade(engine)
    assert info.value.found == "9999"
    assert info.value.expected == _migrate.HEAD
    assert "9999" in str(info.value)
    assert _migrate.HEAD in str(info.value)
    with pytest.raises(SchemaVersionError):
        _migrate.check_at_head(engine)
    # Nothing was touched.
    assert _migrate.current_revision(engine) == "9999"


def test_check_at_head_on_empty_database(engine: Engine) -> None:
    with pytest.raises(StoreError, match="no persched schema"):
        _migrate.check_at_head(engine)
    assert _tables(engine) == set()  # a read-only check writes nothing


def test_concurrent_upgrades_in_threads(empty_db_url: str) -> None:
    engines = [_db.make_engine(empty_db_url) for _ in range(2)]
    barrier = threading.Barrier(len(engines), timeout=TIMEOUT)
    errors: list[BaseException] = []

    def run(eng: Engine) -> None:
        try:
            barrier.wait()
            _migrate.upgrade(eng)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        for eng in engines:
            assert _migrate.current_revision(eng) == _migrate.HEAD
    finally:
        for eng in engines:
            eng.dispose()


@pytest.mark.slow
def test_concurrent_upgrades_in_processes(empty_db_url: str, tmp_path: Path) -> None:
    # The process lock can't help here: the database lock (BEGIN IMMEDIATE or
    # pg_advisory_xact_lock) must serialise the upgrades.
    go = tmp_path / "go"
    child = textwrap.dedent(
        """
        import os, sys, time
        from persched._store import db as _db, migrate as _migrate
        eng = _db.make_engine(sys.argv[1], busy_timeout_seconds=30)
        deadline = time.monotonic() + 30
        while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
            time.sleep(0.01)
        _migrate.upgrade(eng)
        print(_migrate.current_revision(eng))
        eng.dispose()
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", child, empty_db_url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        assert out.strip() == _migrate.HEAD
