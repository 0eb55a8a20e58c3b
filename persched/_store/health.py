"""Whether the schedulers of a database are alive and its jobs run, judged from the database alone.

`persched instances` and `persched check` read only what is here, so that
they work when every scheduler is dead: read transactions, never a write,
never a migration. Each scheduler keeps a row in ``persched_instances`` whose
``lease_until`` its heartbeat moves on (`persched._engine.membership`); a row
whose ``lease_until`` is at or after `now` is a live scheduler. `now` is the
reader's own clock, so a reader whose clock is ahead of the schedulers' by
more than a lease would see them dead: run the check on a host whose clock is
kept (docs/operations.md#health-checks).

The problems (`problems`), each a `Problem`:

- ``no_scheduler``: a namespace has jobs waiting to run (scheduled or
  running, not paused -- or paused with an end, which only a scheduler can
  carry out) and no live scheduler;
- ``overdue``: a scheduled job, not paused, whose ``next_run_at`` is older
  than its ``grace_seconds`` plus the lease (the longest lease among the
  namespace's instance rows, else the default);
- ``failing``: a job whose last `failures` slots of its current generation
  all failed: each slot's last attempt ended "error", "stopped" or "lost"
  ("missed" records are not runs; a slot with an attempt pending is not
  settled, and a run-now run counts as a slot of its own).

The dashboard asks about the jobs of one page (`problems` with ``job_ids``):
the same judgements, the overdue and failing ones looked for among those jobs
only, read by the primary key and judged here, so a page costs the same at any
number of jobs. The waiting jobs are counted only for a namespace without a
live scheduler: a healthy namespace costs no count; one without a scheduler
costs a pass over the waiting jobs (by the ``(state, next_run_at, ...)`` index).

Costs: the overdue jobs come from the ``(state, next_run_at, ...)`` index
(``state = 'scheduled' AND next_run_at < now - lease``); the failing ones are
looked for only among jobs whose ``last_outcome`` is a failure, each by its
``(job_id, run_id)`` index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from sqlalchemy import func, or_, select

from .._model.instant import Instant, Micros, from_datetime, micros, to_datetime
from .._model.models import MAX_RETRIES, JobState
from .._model.pauses import FAILED_OUTCOMES
from .schema import instances, jobs, runs

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from datetime import datetime

    from sqlalchemy import Connection, Row

    from . import Store

__all__ = ["DEFAULT_LEASE", "InstanceRow", "Problem", "job_timestamps", "live_instances", "problems"]

#: The lease assumed for a namespace with no instance row (`JobScheduler`'s default lease_seconds).
DEFAULT_LEASE: Final = Micros(micros(30.0))
_SCHEDULED: Final = JobState.SCHEDULED.value
_DESCHEDULED: Final = JobState.DESCHEDULED.value
_WAITING: Final = (JobState.SCHEDULED.value, JobState.RUNNING.value)

ProblemKind = Literal["no_scheduler", "overdue", "failing"]


@dataclass(frozen=True, slots=True)
class InstanceRow:
    """One scheduler's row of ``persched_instances``."""

    namespace: str
    instance_id: str
    started_at: datetime
    renewed_at: datetime
    lease_until: datetime | None
    shares: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing `persched check` reports (the command line puts it in words)."""

    kind: ProblemKind
    namespace: str
    job_id: str | None = None
    count: int = 0  # no_scheduler: the jobs waiting; failing: the failed slots in a row
    # no_scheduler: the latest renewal seen; overdue: the slot due; failing: the latest start
    at: datetime | None = None
    late: Micros | None = None  # overdue: how late the slot is
    allowed: Micros | None = None  # overdue: its grace plus the lease


def _instance(row: Row[Any, Any, Any, Any, Any, Any]) -> InstanceRow:
    namespace, instance_id, started_at, renewed_at, lease_until, shares = row
    return InstanceRow(str(namespace), str(instance_id), started_at, renewed_at, lease_until, bool(shares))


def _instances(conn: Connection, namespace: str | None) -> list[InstanceRow]:
    query = select(
        instances.c.namespace,
        instances.c.instance_id,
        instances.c.started_at,
        instances.c.renewed_at,
        instances.c.lease_until,
        instances.c.shares,
    ).order_by(instances.c.namespace, instances.c.started_at, instances.c.instance_id)
    if namespace is not None:
        query = query.where(instances.c.namespace == namespace)
    return [_instance(row) for row in conn.execute(query)]


def _alive(row: InstanceRow, now: Instant) -> bool:
    return row.lease_until is not None and from_datetime(row.lease_until) >= now


def live_instances(store: Store, now: Instant, *, all_namespaces: bool = False) -> list[InstanceRow]:
    """The live schedulers of the store's namespace (or of every namespace), oldest first."""
    namespace = None if all_namespaces else store.namespace
    rows = store._read(lambda conn: _instances(conn, namespace), "read instances")
    return [row for row in rows if _alive(row, now)]


def _lease_of(rows: list[InstanceRow]) -> Micros:
    leases = [
        from_datetime(row.lease_until) - from_datetime(row.renewed_at) for row in rows if row.lease_until is not None
    ]
    return Micros(max(leases)) if leases else DEFAULT_LEASE


def _waiting_namespaces(conn: Connection, namespace: str | None, alive: set[str]) -> dict[str, int]:
    """How many jobs wait for a scheduler in each namespace (module docstring) but those in `alive`
    (they have a live scheduler: not counted, so that a healthy namespace costs no count)."""
    if namespace in alive:
        return {}
    query = (
        select(jobs.c.namespace, func.count())
        .where(jobs.c.state.in_(_WAITING))
        .where(or_(jobs.c.paused.is_(False), jobs.c.paused_until.is_not(None)))
        .group_by(jobs.c.namespace)
    )
    if namespace is not None:
        query = query.where(jobs.c.namespace == namespace)
    elif alive:
        query = query.where(jobs.c.namespace.not_in(sorted(alive)))
    return {str(found): int(count) for found, count in conn.execute(query)}


def _overdue(
    conn: Connection,
    namespace: str | None,
    now: Instant,
    lease: dict[str, Micros],
    job_ids: Collection[str] | None,
) -> list[Problem]:
    shortest = min(lease.values(), default=DEFAULT_LEASE)
    query = select(
        jobs.c.namespace, jobs.c.job_id, jobs.c.next_run_at, jobs.c.grace_seconds, jobs.c.state, jobs.c.paused
    )
    if job_ids is None:
        query = query.where(
            jobs.c.state == _SCHEDULED, jobs.c.paused.is_(False), jobs.c.next_run_at < to_datetime(now - shortest)
        )
        if namespace is not None:
            query = query.where(jobs.c.namespace == namespace)
    else:  # a page's jobs, by the primary key alone (see _failing): the conditions are judged below
        query = query.where(jobs.c.job_id.in_(job_ids))
    found = []
    for job_namespace, job_id, next_run_at, grace_seconds, state, paused in conn.execute(
        query.order_by(jobs.c.next_run_at)
    ):
        if state != _SCHEDULED or paused or namespace not in (None, job_namespace):
            continue
        allowed = micros(float(grace_seconds)) + lease.get(str(job_namespace), DEFAULT_LEASE)
        late = now - from_datetime(next_run_at)
        if late > allowed:
            found.append(
                Problem(
                    kind="overdue",
                    namespace=str(job_namespace),
                    job_id=str(job_id),
                    at=next_run_at,
                    late=Micros(late),
                    allowed=Micros(allowed),
                )
            )
    return found


def _failing(conn: Connection, namespace: str | None, failures: int, job_ids: Collection[str] | None) -> list[Problem]:
    query = select(
        jobs.c.namespace,
        jobs.c.job_id,
        jobs.c.generation,
        jobs.c.state,
        jobs.c.last_outcome,
        jobs.c.retries,
        jobs.c.retry_for,
    )
    if job_ids is None:
        query = query.where(jobs.c.state != _DESCHEDULED, jobs.c.last_outcome.in_(FAILED_OUTCOMES))
        if namespace is not None:
            query = query.where(jobs.c.namespace == namespace)
    else:  # a page's jobs, by the primary key alone: the conditions are judged below, on these few rows
        query = query.where(jobs.c.job_id.in_(job_ids))
    found = []
    for job_namespace, job_id, generation, state, last_outcome, retries, retrying in conn.execute(
        query.order_by(jobs.c.namespace, jobs.c.job_id)
    ):
        if state == _DESCHEDULED or last_outcome not in FAILED_OUTCOMES or namespace not in (None, job_namespace):
            continue
        attempts = 1 + (retries if isinstance(retries, int) and 0 < retries <= MAX_RETRIES else 0)
        latest = conn.execute(
            select(runs.c.outcome, runs.c.started_at, runs.c.scheduled_for, runs.c.run_now, runs.c.run_id)
            .where(
                runs.c.job_id == job_id,
                runs.c.generation == generation,
                runs.c.outcome.is_not(None),
                runs.c.outcome != "missed",
            )
            .order_by(runs.c.run_id.desc())
            .limit(failures * attempts)
        ).all()
        slots = _last_attempts(latest, retrying)[:failures]
        if len(slots) == failures and all(outcome in FAILED_OUTCOMES for outcome, _ in slots):
            namespace_of = str(job_namespace)
            found.append(
                Problem(kind="failing", namespace=namespace_of, job_id=str(job_id), count=failures, at=slots[0][1])
            )
    return found


def _last_attempts(runs_newest_first: Sequence[Any], retrying: datetime | None) -> list[tuple[str, datetime]]:
    """The outcome and start of each slot's last attempt, newest slot first: a slot failed when its
    last attempt did. The slot of a pending attempt (`retrying`) is not settled: left out."""
    seen: set[object] = set()
    slots = []
    for outcome, started_at, slot, run_now, run_id in runs_newest_first:
        key = run_id if run_now else slot  # each run-now run stands alone
        if key in seen or (not run_now and slot == retrying):
            continue
        seen.add(key)
        slots.append((outcome, started_at))
    return slots


def problems(
    store: Store,
    now: Instant,
    *,
    all_namespaces: bool = False,
    failures: int = 3,
    job_ids: Collection[str] | None = None,
) -> list[Problem]:
    """Every problem of the store's namespace (or of every namespace), in one read transaction;
    with `job_ids`, the overdue and failing jobs only among those (a page of the dashboard)."""
    namespace = None if all_namespaces else store.namespace

    def body(conn: Connection) -> list[Problem]:
        rows = _instances(conn, namespace)
        by_namespace: dict[str, list[InstanceRow]] = {}
        for row in rows:
            by_namespace.setdefault(row.namespace, []).append(row)
        found = []
        alive = {row.namespace for row in rows if _alive(row, now)}
        for waiting, count in sorted(_waiting_namespaces(conn, namespace, alive).items()):
            renewed = [row.renewed_at for row in by_namespace.get(waiting, [])]
            latest = max(renewed) if renewed else None
            found.append(Problem(kind="no_scheduler", namespace=waiting, count=count, at=latest))
        lease = {name: _lease_of(members) for name, members in by_namespace.items()}
        return found + _overdue(conn, namespace, now, lease, job_ids) + _failing(conn, namespace, failures, job_ids)

    return store._read(body, "check health")


def job_timestamps(store: Store) -> dict[str, tuple[datetime | None, datetime | None]]:
    """For each job of the namespace not descheduled: its next run (None when paused or
    finished) and the end of its latest "ok" run (None if none is recorded), for the metrics.

    One read transaction: the namespace's jobs (a pass over the table), then one
    ``GROUP BY job_id`` over their "ok" runs (the run history is bounded by retention).
    """

    def body(conn: Connection) -> dict[str, tuple[datetime | None, datetime | None]]:
        rows = conn.execute(
            select(jobs.c.job_id, jobs.c.state, jobs.c.paused, jobs.c.next_run_at).where(
                jobs.c.namespace == store.namespace, jobs.c.state != JobState.DESCHEDULED.value
            )
        ).all()
        ids = [str(job_id) for job_id, *_ in rows]
        last_ok: dict[str, datetime] = {}
        if ids:
            latest = conn.execute(
                select(runs.c.job_id, func.max(runs.c.finished_at))
                .where(runs.c.job_id.in_(ids), runs.c.outcome == "ok")
                .group_by(runs.c.job_id)
            )
            last_ok = {str(job_id): at for job_id, at in latest if at is not None}
        found: dict[str, tuple[datetime | None, datetime | None]] = {}
        for job_id, state, paused, next_run_at in rows:
            waits = state in _WAITING and not paused
            found[str(job_id)] = (next_run_at if waits else None, last_ok.get(str(job_id)))
        return found

    return store._read(body, "job timestamps")
