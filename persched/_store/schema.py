"""The tables, as SQLAlchemy Core metadata.

The revisions in ``migrations/versions`` are the schema's source of truth;
this mirrors the head revision for the queries (a migration test checks that
the two agree). Partial indexes get their predicates only with an engine of
their dialect (`attach_index_predicates`), so importing this imports no
dialect. MySQL and MariaDB get column types that keep what the generic ones
would lose (`_on_mysql`), and their one-run-per-slot index is over
`MYSQL_SLOT_COLUMN`, a generated column not in this metadata: see
docs/explanation/store.md, "Schema and migrations".
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
    true,
    types,
)
from sqlalchemy.ext.compiler import compiles

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, TextClause

__all__ = [
    "COUNTER_MAX",
    "MYSQL_SLOT_COLUMN",
    "MYSQL_SLOT_EXPRESSION",
    "PARTIAL_INDEX_DIALECTS",
    "UTCDateTime",
    "attach_index_predicates",
    "changes",
    "instances",
    "jobs",
    "metadata",
    "partial_index_predicates",
    "runs",
]

_MYSQL: Final = ("mysql", "mariadb")
#: MySQL/MariaDB only: persched_runs' generated column behind uq_persched_runs_slot (revision 0003).
MYSQL_SLOT_COLUMN: Final = "grid_slot"
MYSQL_SLOT_EXPRESSION: Final = "CASE WHEN run_now THEN NULL ELSE scheduled_for END"


class _Seconds(Float):  # type: ignore[type-arg]  # Float's generic parameter is its Python type
    """Float seconds: an 8-byte float on every engine (``DOUBLE`` on MySQL, whose ``FLOAT`` is 4 bytes)."""

    inherit_cache = True


class _LongText(Text):
    """JSON arguments and tracebacks: ``MEDIUMTEXT`` (16 MiB) on MySQL, whose ``TEXT`` holds 64 KiB."""

    inherit_cache = True


def _on_mysql(rendered: str) -> Any:  # noqa: ANN401 - a compiler hook
    def render(element: object, compiler: object, **kw: object) -> str:
        return rendered

    return render


for _name in _MYSQL:
    compiles(_Seconds, _name)(_on_mysql("DOUBLE"))
    compiles(_LongText, _name)(_on_mysql("MEDIUMTEXT"))


def _not_mysql(
    ddl: object,
    target: object,
    bind: object,
    tables: object = None,
    state: object = None,
    **kw: Any,  # noqa: ANN401 - SQLAlchemy's DDLIfCallable passes dialect=, compiler=, checkfirst=
) -> bool:
    """DDL condition: not on MySQL/MariaDB (the slot index there is the revisions' own)."""
    return kw["dialect"].name not in _MYSQL


#: The bound of the 64-bit counters (run_count, error_count, beats) and generations: counters saturate
#: at it; a generation never does (a replacement past it is refused).
COUNTER_MAX: Final = 2**63 - 1
# A 64-bit integer column; SQLite's INTEGER is one already, and only an INTEGER primary key is its rowid.
_Wide = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(types.TypeDecorator[datetime]):
    """An aware UTC datetime in every engine: `timestamptz` on PostgreSQL, on
    SQLite the fixed-width naive UTC text that SQLAlchemy writes (so that `<=`
    compares instants), on MySQL/MariaDB a naive UTC ``DATETIME(6)``
    (microseconds, no time zone conversion, unlike ``TIMESTAMP``). Naive
    datetimes are refused on the way in."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> types.TypeEngine[Any]:
        if dialect.name in _MYSQL:
            from sqlalchemy.dialects.mysql import DATETIME  # loaded already: this is a MySQL engine

            return dialect.type_descriptor(DATETIME(fsp=6))
        return dialect.type_descriptor(self.impl)

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:  # noqa: ANN401 - SQLAlchemy hook
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValueError(f"expected an aware datetime, got {value!r}")
        utc: datetime = value.astimezone(timezone.utc)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" or dialect.name in _MYSQL else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:  # noqa: ANN401 - SQLAlchemy hook
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime from the driver, got {value!r}")
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


# One row per job_id, never deleted: a descheduled job keeps its row so that its generation
# counter survives (no ABA). The view persched_job_states (revision 0008) reads it for SQL users.
jobs = Table(
    "persched_jobs",
    metadata,
    Column("job_id", String(200), primary_key=True),
    Column("target", String(1000), nullable=False),
    Column("args", _LongText, nullable=False),  # JSON array
    Column("kwargs", _LongText, nullable=False),  # JSON object
    Column("interval_seconds", _Seconds, nullable=True),  # None for a cron job
    Column("cron", String(200), nullable=True),
    Column("timezone", String(64), nullable=False, server_default="UTC"),
    Column("recurrence", String(16), nullable=False, server_default="fixed_rate"),
    Column("misfire", String(16), nullable=False, server_default="coalesce"),
    Column("max_catch_up", Integer, nullable=True),
    Column("grace_seconds", _Seconds, nullable=False, server_default="1"),
    Column("overlap", String(16), nullable=False, server_default="forbid"),
    Column("jitter_seconds", _Seconds, nullable=False, server_default="0"),
    Column("start_at", UTCDateTime, nullable=True),
    Column("end_at", UTCDateTime, nullable=True),
    Column("max_runtime_seconds", _Seconds, nullable=True),
    Column("on_overrun", String(16), nullable=False, server_default="warn"),  # revision 0012
    Column("executor", String(16), nullable=False, server_default="thread"),
    Column("stop_grace_seconds", _Seconds, nullable=False, server_default="5"),
    Column("exclude", Text, nullable=True),  # excluded dates: a JSON array of text, NULL for none (revision 0011)
    Column("pause_after_failures", Integer, nullable=True),  # NULL: never paused for failures (revision 0012)
    Column("retries", Integer, nullable=False, server_default="0"),  # the retry options (revision 0014)
    Column("retry_delay_seconds", _Seconds, nullable=False, server_default="10"),
    Column("retry_backoff", _Seconds, nullable=False, server_default="2"),
    Column("retry_max_delay_seconds", _Seconds, nullable=True),
    Column("retry_lost", Boolean, nullable=False, server_default=false()),
    Column("first_run_at", UTCDateTime, nullable=False),  # grid anchor
    # The next slot still to run; it moves on when a run of the grid is
    # claimed, and stays put for a run-now run.
    Column("next_run_at", UTCDateTime, nullable=False),
    Column("paused", Boolean, nullable=False, server_default=false()),
    Column("paused_until", UTCDateTime, nullable=True),  # the pause ends by itself then (revision 0010)
    Column("pause_note", String(500), nullable=True),  # why the job is paused, for people
    Column("run_now_at", UTCDateTime, nullable=True),  # a pending run_now() request
    Column("running_for", UTCDateTime, nullable=True),  # scheduled_for of the run in flight
    Column("cancel_requested_at", UTCDateTime, nullable=True),  # cancel() asked the run in flight to stop
    # A pending attempt (next_run_at is when it is due): its number, and the slot it tries again.
    Column("retry_attempt", Integer, nullable=True),
    Column("retry_for", UTCDateTime, nullable=True),
    Column("generation", _Wide, nullable=False),  # 64-bit since revision 0016
    Column("state", String(16), nullable=False),
    Column("owner", String(255), nullable=True),  # instance_id holding the claim
    Column("lease_until", UTCDateTime, nullable=True),
    Column("run_count", _Wide, nullable=False, server_default="0"),
    Column("error_count", _Wide, nullable=False, server_default="0"),
    # Slots in a row that ended in failure, in this generation (revision 0012); saturates like run_count.
    Column("failure_streak", _Wide, nullable=False, server_default="0"),
    Column("last_outcome", String(16), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The persched_changes.seq of the job's last schedule/deschedule.
    Column("change_seq", BigInteger, nullable=False, server_default="0"),
    # The application the job belongs to (revision 0005): a scheduler sees and runs only its own.
    Column("namespace", String(100), nullable=False, server_default="default"),
    Column("declared", Boolean, nullable=False, server_default=false()),  # written by declare()
    # bucket_of(job_id) (revision 0017): the refills of instances sharing the work read only their own
    # buckets. NULL in a row inserted by hand: every instance reads it, its owner queues it.
    Column("owner_bucket", Integer, nullable=True),
    Index(None, "state", "next_run_at", "job_id", "owner_bucket"),  # revision 0017: the refills, in order
    Index(None, "change_seq"),
    Index(None, "paused_until"),  # the earliest end of a timed pause (revision 0010)
)

# One row (id 1): a counter every change of a definition moves; other instances poll it.
changes = Table(
    "persched_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
)

# The instances that share a namespace's work: each renews its own row (`beats` counts up).
instances = Table(
    "persched_instances",
    metadata,
    Column("namespace", String(100), primary_key=True),
    Column("instance_id", String(255), primary_key=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("renewed_at", UTCDateTime, nullable=False),
    Column("beats", BigInteger, nullable=False),
    Column("clock_offset_seconds", _Seconds, nullable=True),  # NULL: not measured
    # Revision 0010: alive until then by its own clock (for a read-only check), and whether it shares the work.
    Column("lease_until", UTCDateTime, nullable=True),
    Column("shares", Boolean, nullable=False, server_default=true()),
)

# Run history. A row is inserted by the claim (outcome NULL while running) and
# completed by the worker, or marked 'lost' by lease recovery.
runs = Table(
    "persched_runs",
    metadata,
    Column("run_id", _Wide, primary_key=True, autoincrement=True),
    Column("job_id", String(200), nullable=False),
    # 64-bit since revision 0016, as the jobs' (also the type of PostgreSQL's array binds: dialects/postgresql.py).
    Column("generation", _Wide, nullable=False),
    Column("scheduled_for", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("outcome", String(16), nullable=True),
    Column("error", _LongText, nullable=True),
    Column("instance_id", String(255), nullable=False),
    Column("lease_until", UTCDateTime, nullable=True),
    # A "missed" record stands for the slots scheduled_for .. missed_until.
    Column("missed_until", UTCDateTime, nullable=True),
    Column("missed_count", BigInteger, nullable=True),  # None: too many to count cheaply (cron)
    Column("overran", Boolean, nullable=False, server_default=false()),
    Column("run_now", Boolean, nullable=False, server_default=false()),
    Column("attempt", Integer, nullable=False, server_default="1"),  # 1, 2, ... of its slot (revision 0014)
    Index(None, "job_id", "run_id"),
)

# Partial indexes, each predicate handed to SQLAlchemy by `attach_index_predicates` when an engine of
# its kind is made: ``postgresql_where=`` here would import the PostgreSQL dialect on every SQLite start.
# Only DDL reads them; the migration tests compare them with the revisions' indexes.
_PARTIAL_INDEXES: Final[tuple[tuple[Index, ColumnElement[bool] | TextClause], ...]] = (
    # One run per grid slot; run-now runs are off the grid and may share an instant with a slot.
    # (MySQL/MariaDB: over MYSQL_SLOT_COLUMN instead; not created from here.)
    (
        Index(
            "uq_persched_runs_slot",
            runs.c.job_id,
            runs.c.generation,
            runs.c.scheduled_for,
            runs.c.attempt,
            unique=True,
        ).ddl_if(callable_=_not_mysql),
        text("NOT run_now"),
    ),
    # Open runs (outcome NULL) are few: found for renewal and recovery without indexing the history.
    (Index("ix_persched_runs_open", runs.c.instance_id), runs.c.outcome.is_(None)),
    # Runs that did not end "ok", by outcome: the dashboard's filter. Ordinary runs never maintain it.
    (Index("ix_persched_runs_outcome", runs.c.outcome, runs.c.run_id), runs.c.outcome != "ok"),
    # Each job's failed runs, for retention's keep_error_runs. MySQL has none (it walks (job_id, run_id)).
    (
        Index("ix_persched_runs_failed", runs.c.job_id, runs.c.run_id).ddl_if(callable_=_not_mysql),
        text("outcome IN ('error', 'lost', 'stopped')"),
    ),
)
#: The engines whose dialects take a `where` option on an index.
PARTIAL_INDEX_DIALECTS: Final = ("sqlite", "postgresql")
_ATTACH_LOCK: Final = threading.Lock()  # two engines made at once in two threads


def partial_index_predicates() -> dict[str, ColumnElement[bool] | TextClause]:
    """The predicate of each partial index, by index name (for the migration tests)."""
    return {str(index.name): where for index, where in _PARTIAL_INDEXES}


def attach_index_predicates(dialect_name: str) -> None:
    """Give the partial indexes their predicate as ``<dialect_name>_where`` (idempotent; SQLite and PostgreSQL)."""
    if dialect_name not in PARTIAL_INDEX_DIALECTS:
        return
    with _ATTACH_LOCK:
        for index, where in _PARTIAL_INDEXES:
            options = index.dialect_options[dialect_name]
            if options["where"] is None:
                options["where"] = where
