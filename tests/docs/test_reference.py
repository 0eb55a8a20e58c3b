"""The reference pages say what the code has: every option, every column, the parser's own help."""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING

import sqlalchemy

from persched import AsyncJobScheduler, JobScheduler
from tests.docs.samples import REPO, cli_reference

if TYPE_CHECKING:
    from pathlib import Path


def _page(name: str) -> str:
    return (REPO / "docs" / "reference" / name).read_text(encoding="utf-8")


def test_the_options_table_lists_every_parameter_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (`[^`]*`|) \|", _page("options.md"), re.M))
    for cls in (JobScheduler, AsyncJobScheduler):
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if name == "self":
                continue
            assert name in rows, f"{cls.__name__}({name}=...) is not in docs/reference/options.md"
            assert rows[name] == f"`{parameter.default!r}`".replace("'", '"'), name


def test_the_schema_page_names_every_table_and_column(tmp_path: Path) -> None:
    """Every table and column of a database that start() migrated (read back from SQLite itself)."""
    url = f"sqlite:///{tmp_path / 'schema.db'}"
    with JobScheduler(url):
        pass
    engine = sqlalchemy.create_engine(url)
    try:
        found = sqlalchemy.inspect(engine)
        tables = {t: [c["name"] for c in found.get_columns(t)] for t in found.get_table_names()}
    finally:
        engine.dispose()
    text = _page("schema.md")
    for table, columns in tables.items():
        if table == "persched_alembic_version":
            assert f"`{table}`" in text
            continue
        assert f"## `{table}`" in text, table
        section = text.split(f"## `{table}`", 1)[1].split("\n## ", 1)[0]
        for column in columns:
            assert f"`{column}`" in section, f"{table}.{column}"


def test_the_cli_page_is_the_parser_help() -> None:
    assert _page("cli.md") == cli_reference(), "run: python -m tests.docs.samples --write-cli"
