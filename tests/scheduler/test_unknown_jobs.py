"""A typo is an error, "nothing to change" is False: pause, resume, run_now and deschedule of ids that are not there.

pause(), resume() and run_now() of an id this namespace does not have (never
scheduled, descheduled, or a job of another namespace) raise
`JobNotFoundError`, naming the id, the namespace and, when another namespace
holds the id, that one. A job that is there but needs no change answers
False. deschedule() stays idempotent ("True if an active job was
removed"): an unknown or descheduled id is False, never an error. On every
engine, through `JobScheduler` and `AsyncJobScheduler`.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pytest

from persched import AsyncJobScheduler, JobScheduler
from persched.errors import (
    InvalidJobError,
    JobNotFoundError,
    PerschedError,
    SchedulerStateError,
    SchemaVersionError,
    StoreError,
)
from tests.support import jobs
from tests.support.helpers import TIMEOUT, db_sql

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

VERBS = ("pause", "resume", "run_now")


def changes(url: str) -> list[tuple[object, ...]]:
    """Every job row as stored: what a refused call must leave alone."""
    rows = db_sql(url, "SELECT job_id, namespace, state, paused, run_now_at, generation, updated_at FROM persched_jobs")
    return sorted(rows, key=repr)


def test_the_error_is_a_lookup_error_with_its_message_unquoted() -> None:
    # The documented import line (at the top of this module) still works, with the new name beside it.
    assert all(issubclass(e, PerschedError) for e in (InvalidJobError, SchemaVersionError, StoreError))
    exc = JobNotFoundError("reprot", "default")
    assert isinstance(exc, LookupError)
    assert isinstance(exc, PerschedError)
    assert not isinstance(exc, KeyError)  # a KeyError would print its message quoted
    assert str(exc) == "no job 'reprot' in namespace 'default'; jobs() lists the namespace's jobs"
    assert (exc.job_id, exc.namespace, exc.owner, exc.descheduled) == ("reprot", "default", None, False)


@pytest.mark.parametrize("verb", VERBS)
def test_an_unknown_id_raises_naming_the_id_and_the_namespace_and_writes_nothing(
    make_scheduler: SchedulerFactory, db_url: str, verb: str
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("report", jobs.record, 60.0, args=("report",))
    before = changes(db_url)
    with pytest.raises(JobNotFoundError) as info:
        getattr(sched, verb)("reprot")
    assert str(info.value).startswith("no job 'reprot' in namespace 'default'")
    assert (info.value.job_id, info.value.namespace, info.value.owner, info.value.descheduled) == (
        "reprot",
        "default",
        None,
        False,
    )
    assert changes(db_url) == before
    assert sched.get_job("reprot") is None  # get_job keeps answering None


@pytest.mark.parametrize("verb", VERBS)
def test_a_descheduled_id_raises_saying_it_was_descheduled(make_scheduler: SchedulerFactory, verb: str) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("report", jobs.record, 60.0, args=("report",))
    assert sched.deschedule("report") is True
    with pytest.raises(JobNotFoundError, match="no job 'report' in namespace 'default': it was descheduled") as info:
        getattr(sched, verb)("report")
    assert info.value.descheduled is True
    assert info.value.owner is None


def test_nothing_to_change_is_false_not_an_error(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("report", jobs.record, 60.0, args=("report",))
    assert sched.resume("report") is False  # not paused
    assert sched.pause("report") is True
    assert sched.pause("report") is False  # paused already
    assert sched.resume("report") is True
    ended = datetime.fromtimestamp(fake_clock.now() - 1, tz=timezone.utc)
    sched.schedule("ended", jobs.record, 60.0, args=("ended",), end_at=ended)
    assert sched.pause("ended") is False  # finished: nothing to pause
    with pytest.raises(SchedulerStateError, match="finished"):
        sched.run_now("ended")  # unchanged: a state refusal, not a lookup


def test_deschedule_of_an_unknown_or_descheduled_id_is_false(make_scheduler: SchedulerFactory, db_url: str) -> None:
    sched = make_scheduler(start=True)
    before = changes(db_url)
    assert sched.deschedule("never-there") is False
    assert sched.deschedule("never-there", wait=True, timeout=TIMEOUT) is False
    assert changes(db_url) == before
    sched.schedule("report", jobs.record, 60.0, args=("report",))
    assert sched.deschedule("report") is True
    assert sched.deschedule("report") is False


def test_another_namespaces_job_is_named_by_the_error_and_by_deschedules_warning(
    db_url: str, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        JobScheduler(db_url, clock=fake_clock, namespace="billing") as billing,
        JobScheduler(db_url, clock=fake_clock, namespace="web") as web,
    ):
        billing.schedule("invoices", jobs.record, 60.0, args=("invoices",))
        before = changes(db_url)
        with pytest.raises(JobNotFoundError) as info:
            web.pause("invoices")
        assert str(info.value) == (
            "no job 'invoices' in namespace 'web': it is a job of namespace 'billing'; "
            "a scheduler sees only its own namespace's jobs (namespace='billing')"
        )
        assert info.value.owner == "billing"
        with caplog.at_level(logging.WARNING, logger="persched"):
            assert web.deschedule("invoices") is False
        assert [r.getMessage() for r in caplog.records if r.name == "persched"] == [
            "deschedule('invoices') in namespace 'web' changed nothing: it is a job of namespace 'billing'"
        ]
        assert changes(db_url) == before
        # A descheduled job of another namespace is nobody's: reported as unknown, not as that namespace's.
        assert billing.deschedule("invoices") is True
        with pytest.raises(JobNotFoundError) as gone:
            web.resume("invoices")
        assert (gone.value.owner, gone.value.descheduled) == (None, False)


def test_the_async_front_end_raises_the_same(db_url: str, fake_clock: FakeClock) -> None:
    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=fake_clock) as sched:
            await sched.schedule("report", jobs.record, 60.0, args=("report",))
            calls: list[Callable[[str], object]] = [sched.pause, sched.resume, sched.run_now]
            for call in calls:
                with pytest.raises(JobNotFoundError, match="no job 'reprot' in namespace 'default'"):
                    await call("reprot")  # type: ignore[misc]  # each returns a coroutine
            assert await sched.deschedule("reprot") is False
            assert await sched.resume("report") is False
            assert await sched.pause("report") is True
            assert await sched.get_job("reprot") is None

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))


def test_the_error_survives_pickling_with_its_fields() -> None:
    exc = JobNotFoundError("invoices", "web", owner="billing", remedy="add --namespace billing")
    copy = pickle.loads(pickle.dumps(exc))
    assert (type(copy), str(copy)) == (JobNotFoundError, str(exc))
    assert (copy.job_id, copy.namespace, copy.owner, copy.descheduled) == ("invoices", "web", "billing", False)
