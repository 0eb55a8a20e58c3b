"""The tables, as SQLAlchemy Core metadata.

Alembic revisions in ``migrations/versions`` are the source of truth for the
schema in a database; this module mirrors the head revision for the queries in
``_store`` (a migration test checks that the two agree). The partial
indexes' predicates reach SQLAlchemy only with an engine of their dialect
(`attach_index_predicates`), so that importing this module imports no dialect.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    text,
    types,
)

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, TextClause

__all__ = [
    "PARTIAL_INDEX_DIALECTS",
    "UTCDateTime",
    "attach_index_predicates",
    "changes",
    "jobs",
    "metadata",
    "partial_index_predicates",
    "runs",
]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(types.TypeDecorator[datetime]):
    """An aware UTC datetime in every engine: `timestamptz` on PostgreSQL, and
    on SQLite the fixed-width naive UTC text that SQLAlchemy writes (so that
    `<=` compares instants). Naive datetimes are refused on the way in."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:  # noqa: ANN401 - SQLAlchemy hook
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValueError(f"expected an aware datetime, got {value!r}")
        utc: datetime = value.astimezone(timezone.utc)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:  # noqa: ANN401 - SQLAlchemy hook
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime from the driver, got {value!r}")
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


# One row per job_id, never deleted: a descheduled job keeps its row (state
# 'descheduled') so that its generation counter survives (no ABA).
jobs = Table(
    "persched_jobs",
    metadata,
    Column("job_id", String(200), primary_key=True),
    Column("target", String(1000), nullable=False),
    Column("args", Text, nullable=False),  # JSON array
    Column("kwargs", Text, nullable=False),  # JSON object
    Column("interval_seconds", Float, nullable=True),  # None for a cron job
    Column("cron", String(200), nullable=True),
    Column("timezone", String(64), nullable=False, server_default="UTC"),
    Column("recurrence", String(16), nullable=False, server_default="fixed_rate"),
    Column("misfire", String(16), nullable=False, server_default="coalesce"),
    Column("max_catch_up", Integer, nullable=True),
    Column("grace_seconds", Float, nullable=False, server_default="1"),
    Column("overlap", String(16), nullable=False, server_default="forbid"),
    Column("jitter_seconds", Float, nullable=False, server_default="0"),
    Column("start_at", UTCDateTime, nullable=True),
    Column("end_at", UTCDateTime, nullable=True),
    Column("max_runtime_seconds", Float, nullable=True),
    Column("first_run_at", UTCDateTime, nullable=False),  # grid anchor
    # The next slot still to run; it moves on when a run of the grid is
    # claimed, and stays put for a run-now run (SPEC-policies).
    Column("next_run_at", UTCDateTime, nullable=False),
    Column("paused", Boolean, nullable=False, server_default=false()),
    Column("run_now_at", UTCDateTime, nullable=True),  # a pending run_now() request
    Column("running_for", UTCDateTime, nullable=True),  # scheduled_for of the run in flight
    Column("generation", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("owner", String(255), nullable=True),  # instance_id holding the claim
    Column("lease_until", UTCDateTime, nullable=True),
    Column("run_count", Integer, nullable=False, server_default="0"),
    Column("error_count", Integer, nullable=False, server_default="0"),
    Column("last_outcome", String(16), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The persched_changes.seq of the job's last schedule/deschedule.
    Column("change_seq", BigInteger, nullable=False, server_default="0"),
    # The application the job belongs to (revision 0004): a scheduler sees and runs only its own.
    Column("namespace", String(100), nullable=False, server_default="default"),
    Column("declared", Boolean, nullable=False, server_default=false()),  # written by declare()
    Index(None, "state", "next_run_at"),
    Index(None, "change_seq"),
    Index(None, "namespace", "state"),
)

# One row (id 1): a counter bumped by every change of a job's definition or
# state by schedule()/deschedule(), so that other instances find changes by
# polling one value (SPEC-multi).
changes = Table(
    "persched_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
)

# Run history. A row is inserted by the claim (outcome NULL while running) and
# completed by the worker, or marked 'lost' by lease recovery.
runs = Table(
    "persched_runs",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(200), nullable=False),
    Column("generation", Integer, nullable=False),
    Column("scheduled_for", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("outcome", String(16), nullable=True),
    Column("error", Text, nullable=True),
    Column("instance_id", String(255), nullable=False),
    Column("lease_until", UTCDateTime, nullable=True),
    # A "missed" record stands for the slots scheduled_for .. missed_until.
    Column("missed_until", UTCDateTime, nullable=True),
    Column("missed_count", BigInteger, nullable=True),  # None: too many to count cheaply (cron)
    Column("overran", Boolean, nullable=False, server_default=false()),
    Column("run_now", Boolean, nullable=False, server_default=false()),
    Index(None, "job_id", "run_id"),
)

# Partial indexes. Each predicate is written once, below, and handed to SQLAlchemy as
# `sqlite_where` / `postgresql_where` by `attach_index_predicates` when persched makes an engine
# of that kind (`persched._db`), not here: an `Index(..., postgresql_where=...)` makes SQLAlchemy
# import its PostgreSQL dialect to check the keyword, about 0.03 s of every `persched jobs` on
# SQLite (issue 15). Only DDL reads the predicates (Alembic's autogenerate, `create_all`); the
# queries never do. The migration tests compare them with the indexes the revisions create.
_PARTIAL_INDEXES: Final[tuple[tuple[Index, ColumnElement[bool] | TextClause], ...]] = (
    # One run per grid slot; run-now runs are off the grid and may share an instant with a slot.
    (
        Index("uq_persched_runs_slot", runs.c.job_id, runs.c.generation, runs.c.scheduled_for, unique=True),
        text("NOT run_now"),
    ),
    # Open runs (outcome NULL) are few; a partial index finds them for lease
    # renewal and recovery without indexing the whole history.
    (Index("ix_persched_runs_open", runs.c.instance_id), runs.c.outcome.is_(None)),
    # Runs that did not end "ok", by outcome, newest last: the dashboard's runs page filtered by
    # outcome (revision 0004). Partial, so ordinary runs never maintain it.
    (Index("ix_persched_runs_outcome", runs.c.outcome, runs.c.run_id), runs.c.outcome != "ok"),
)
#: The engines whose dialects take a `where` option on an index.
PARTIAL_INDEX_DIALECTS: Final = ("sqlite", "postgresql")
_ATTACH_LOCK: Final = threading.Lock()  # two engines made at once in two threads


def partial_index_predicates() -> dict[str, ColumnElement[bool] | TextClause]:
    """The predicate of each partial index, by index name (for the migration tests)."""
    return {str(index.name): where for index, where in _PARTIAL_INDEXES}


def attach_index_predicates(dialect_name: str) -> None:
    """Give the partial indexes their predicate as ``<dialect_name>_where`` (idempotent).

    Called for every engine persched makes, when SQLAlchemy has imported
    that engine's dialect anyway; a dialect other than SQLite's or
    PostgreSQL's is left alone.
    """
    if dialect_name not in PARTIAL_INDEX_DIALECTS:
        return
    with _ATTACH_LOCK:
        for index, where in _PARTIAL_INDEXES:
            options = index.dialect_options[dialect_name]
            if options["where"] is None:
                options["where"] = where
