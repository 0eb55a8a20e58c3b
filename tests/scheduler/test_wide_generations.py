"""A job's generation is 64-bit on every engine and never saturates (docs/reference/behaviour.md#rows-edited-by-hand).

Every replacement, and every schedule after a deschedule, takes the next
generation, never one used before (no ABA). The tests plant a generation by
hand: at the old 32-bit bound the job is replaced, descheduled, scheduled
again and runs each time, its runs recorded under generations past 2**31; at
2**63 - 1, the last one there is, the job keeps running and can be paused,
resumed and descheduled, but a replacement is refused with an error naming the job and
saying what to do, and every other job carries on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

from persched import JobSpec
from persched.errors import InvalidJobError
from tests.support import jobs
from tests.support.helpers import db_sql, finished_runs, wait_until

if TYPE_CHECKING:
    from persched import JobScheduler
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


def _planted(make_scheduler: SchedulerFactory, clock: FakeClock, job_id: str, generation: int) -> JobScheduler:
    """A started scheduler over `job_id` and "other" (every second), `job_id`'s generation set by hand
    before, once `job_id` ran its first slot in that generation."""
    first = make_scheduler()
    for name in (job_id, "other"):
        first.schedule(name, jobs.record, 1.0, args=(name,))
    first.shutdown()
    db_sql(make_scheduler.url, "UPDATE persched_jobs SET generation = :g WHERE job_id = :j", g=generation, j=job_id)
    sched = make_scheduler(start=True)
    clock.advance(1.0)
    _ran(sched, job_id, generation)  # claims and completions keep the generation: the job runs
    return sched


def _ran(sched: JobScheduler, job_id: str, generation: int) -> None:
    """Wait until a run of `job_id` in `generation` ended ok."""
    wait_until(
        lambda: any(r.generation == generation and r.outcome == "ok" for r in finished_runs(sched, job_id)),
        message=f"a run of {job_id} generation {generation}",
    )


def test_a_job_past_the_32_bit_bound_is_replaced_rescheduled_and_runs(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _planted(make_scheduler, fake_clock, "big", INT32_MAX)

    # Before revision 0016, PostgreSQL and MariaDB refused this write: out of range for an INTEGER.
    replaced = sched.schedule("big", jobs.record, 2.0, args=("big", "replaced"))
    assert replaced.generation == INT32_MAX + 1
    fake_clock.advance(2.0)
    _ran(sched, "big", INT32_MAX + 1)

    assert sched.deschedule("big")
    again = sched.schedule("big", jobs.record, 2.0, args=("big", "again"))
    assert again.generation == INT32_MAX + 2
    fake_clock.advance(2.0)
    _ran(sched, "big", INT32_MAX + 2)

    recorded = db_sql(make_scheduler.url, "SELECT DISTINCT generation FROM persched_runs WHERE job_id = 'big'")
    assert sorted(g for (g,) in recorded) == [INT32_MAX, INT32_MAX + 1, INT32_MAX + 2]
    assert [c.args for c in jobs.calls("big")][-2:] == [("replaced",), ("again",)]
    assert any(r.generation == 1 for r in finished_runs(sched, "other"))  # the other job ran on


def test_a_job_at_the_64_bit_bound_runs_but_is_never_replaced(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _planted(make_scheduler, fake_clock, "maxed", INT64_MAX)
    _ran(sched, "other", 1)

    with pytest.raises(InvalidJobError) as refused:
        sched.schedule("maxed", jobs.record, 2.0, args=("maxed", "new"))
    assert refused.value.argument == "job_id"
    reason = refused.value.reason
    assert "'maxed'" in reason
    assert f"{INT64_MAX}" in reason
    assert "edited by hand" in reason
    assert "under another job id" in reason
    with pytest.raises(InvalidJobError) as whole:  # a declaration refuses as a whole: nothing written
        sched.declare([JobSpec("other", jobs.record, 5.0, args=("other",)), JobSpec("maxed", jobs.record, 2.0)])
    assert whole.value.argument == "specs['maxed'].job_id"
    maxed, other = sched.get_job("maxed"), sched.get_job("other")
    assert maxed is not None
    assert other is not None
    assert (maxed.generation, maxed.interval_seconds) == (INT64_MAX, 1.0)  # left as it was
    assert (other.generation, other.interval_seconds) == (1, 1.0)

    assert sched.pause("maxed")
    assert sched.resume("maxed")

    # Every other job carries on: replaced, and running.
    assert sched.schedule("other", jobs.record, 2.0, args=("other", "replaced")).generation == 2
    fake_clock.advance(2.0)
    _ran(sched, "other", 2)
    wait_until(lambda: len(finished_runs(sched, "maxed")) >= 2, message="a second run of maxed")  # it runs on

    # A deschedule keeps the generation; a schedule after it would need the next one.
    assert sched.deschedule("maxed")
    with pytest.raises(InvalidJobError, match="'maxed'"):
        sched.schedule("maxed", jobs.record, 2.0)
    assert sched.get_job("maxed") is None
    assert db_sql(make_scheduler.url, "SELECT generation FROM persched_jobs WHERE job_id = 'maxed'") == [(INT64_MAX,)]


@pytest.mark.sqlite_only("only SQLite lets text into an integer column")
def test_an_unreadable_generation_after_runs_of_the_last_one_is_refused_too(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _planted(make_scheduler, fake_clock, "maxed", INT64_MAX)
    sched.shutdown()
    # The replacement of an unreadable generation goes on after its runs' highest: none is left.
    db_sql(make_scheduler.url, "UPDATE persched_jobs SET generation = 'two' WHERE job_id = 'maxed'")
    with pytest.raises(InvalidJobError, match=f"'maxed' is at generation {INT64_MAX}"):
        make_scheduler().schedule("maxed", jobs.record, 2.0)
    assert db_sql(make_scheduler.url, "SELECT generation FROM persched_jobs WHERE job_id = 'maxed'") == [("two",)]
