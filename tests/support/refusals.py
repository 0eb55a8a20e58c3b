"""A job row that the database refuses to update in one way: a trigger on every engine.

`refused` makes the database refuse the UPDATEs of one job's row that match a
condition on its ``OLD`` and ``NEW`` values: `COUNTING` (moving ``run_count``,
as a 32-bit column refused ``run_count + 1`` at 2**31 - 1) or `CLAIMING`
(moving it to ``running``), while other updates of that row (a pause) and
every other row go through: the "one bad row" that a claim or completion
batch, or a recovery round, must settle alone.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final

from sqlalchemy import text

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy import Engine

__all__ = ["CLAIMING", "COUNTING", "REFUSAL", "refused"]

REFUSAL: Final = "out of range (a test trigger)"
COUNTING: Final = "NEW.run_count <> OLD.run_count"
CLAIMING: Final = "NEW.state = 'running' AND OLD.state <> 'running'"
_NAME: Final = "persched_test_refuse_counting"


def _create(dialect: str, job_id: str, when: str) -> list[str]:
    if dialect == "sqlite":
        return [
            f"CREATE TRIGGER {_NAME} BEFORE UPDATE ON persched_jobs"
            f" WHEN OLD.job_id = '{job_id}' AND {when}"
            f" BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
        ]
    if dialect == "postgresql":
        return [
            f"CREATE FUNCTION {_NAME}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF OLD.job_id = '{job_id}' AND {when} THEN"
            f" RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = 'numeric_value_out_of_range'; END IF;"
            " RETURN NEW; END $$",
            f"CREATE TRIGGER {_NAME} BEFORE UPDATE ON persched_jobs FOR EACH ROW EXECUTE FUNCTION {_NAME}()",
        ]
    return [  # MySQL, MariaDB: error 1264, "Out of range value", as a 32-bit column gives
        f"CREATE TRIGGER {_NAME} BEFORE UPDATE ON persched_jobs FOR EACH ROW BEGIN"  # noqa: S608 - test data
        f" IF OLD.job_id = '{job_id}' AND {when} THEN"
        f" SIGNAL SQLSTATE '22003' SET MESSAGE_TEXT = '{REFUSAL}', MYSQL_ERRNO = 1264; END IF; END"
    ]


def _drop(dialect: str) -> list[str]:
    if dialect == "postgresql":
        return [f"DROP TRIGGER IF EXISTS {_NAME} ON persched_jobs", f"DROP FUNCTION IF EXISTS {_NAME}()"]
    return [f"DROP TRIGGER IF EXISTS {_NAME}"]


@contextlib.contextmanager
def refused(engine: Engine, job_id: str, when: str) -> Iterator[None]:
    """While inside, the database refuses the updates of `job_id`'s row for which `when` holds
    (dropped on exit: the PostgreSQL and MariaDB databases outlive the test)."""
    dialect = engine.dialect.name
    with engine.begin() as conn:
        for statement in _create(dialect, job_id, when):
            conn.execute(text(statement))
    try:
        yield
    finally:
        with engine.begin() as conn:
            for statement in _drop(dialect):
                conn.execute(text(statement))
