"""``declare()`` of a set of any size: no statement binds more parameters than the engine takes, and
a declaration that changes nothing writes nothing.

On every engine, with the engine's limit of parameters made small so that a
few dozen specs need the chunks that 100,000 need on a real limit
(benchmarks/declare_many.py measures the real sizes).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import pytest
from sqlalchemy import event

from persched import JobScheduler, JobSpec, JobState
from persched.testing import FakeClock
from tests.support.helpers import db_sql
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator

START: Final = 1_700_000_123.456789
TARGET: Final = "tests.support.jobs:record"
LIMIT: Final = 64  # parameters one statement may bind, in these tests (a job's row binds about 49)

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def specs(ids: range, interval: float = 60.0) -> list[JobSpec]:
    return [JobSpec(f"job-{i:03d}", TARGET, interval, args=(i,)) for i in ids]


@contextlib.contextmanager
def statements(sched: JobScheduler) -> Iterator[list[tuple[str, int]]]:
    """Each statement the scheduler's store sends meanwhile from this thread (not the heartbeat's, the
    dispatcher's), with the parameters one execution binds."""
    sent: list[tuple[str, int]] = []
    caller = threading.get_ident()

    def grab(conn: object, cursor: object, sql: str, params: Any, context: object, many: bool) -> None:  # noqa: ANN401
        if threading.get_ident() == caller:
            rows = params if many else [params]
            sent.extend((sql, len(row or ())) for row in rows)

    engine = store_of(sched).engine
    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", grab)


@contextlib.contextmanager
def parameter_limit(sched: JobScheduler, limit: int) -> Iterator[None]:
    with mock.patch.object(type(store_of(sched).dialect), "max_parameters", limit):
        yield


def test_a_declaration_binds_no_more_parameters_than_the_engine_takes(app: JobScheduler) -> None:
    app.declare(specs(range(150)))
    with parameter_limit(app, LIMIT), statements(app) as sent:
        # 45 replaced, 5 unchanged, 60 new, 100 pruned: each set larger than the limit.
        declared = app.declare([*specs(range(100, 145), 90.0), *specs(range(145, 210))], prune=True)
    assert max(count for _, count in sent) <= LIMIT
    assert (len(declared.created), len(declared.replaced), len(declared.unchanged)) == (60, 45, 5)
    assert declared.pruned == tuple(f"job-{i:03d}" for i in range(100))
    assert {j.job_id: (j.generation, j.interval_seconds) for j in app.jobs()} == {
        **{f"job-{i:03d}": (2, 90.0) for i in range(100, 145)},
        **{f"job-{i:03d}": (1, 60.0) for i in range(145, 210)},
    }


def test_an_unchanged_declaration_writes_nothing(db_url: str, app: JobScheduler, clock: FakeClock) -> None:
    first = app.declare(specs(range(30)), prune=True)
    seq = db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1")
    clock.advance(17.25)
    with parameter_limit(app, LIMIT), statements(app) as sent:
        again = app.declare(specs(range(30)), prune=True)
    assert again.unchanged == tuple(j.job_id for j in first)
    assert not again.changed
    assert [(j.generation, j.next_run_at, j.updated_at) for j in again] == [
        (j.generation, j.next_run_at, j.updated_at) for j in first
    ]
    writes = [sql for sql, _ in sent if sql.lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]
    assert writes == []
    assert db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1") == seq  # no change announced
    assert all(j.state is JobState.SCHEDULED for j in app.jobs())
