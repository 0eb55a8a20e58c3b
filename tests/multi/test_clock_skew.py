"""Instances whose wall clocks are wrong share the work as if they were right (docs/multi.md, "What skew does").

Three schedulers in this process share one database on each engine, on the real clock;
one of them gets `persched.testing.ShiftedClock`: its wall time two hours ahead or behind,
its monotonic time untouched, as on a host after a bad NTP step. Each measures its time
against the database's clock (SQLite: this machine's) and keeps to the database's time.

- Ahead: it runs its share of the jobs on the grid, takes no row it only believes overdue,
  and when it leaves, the others go on running every job (without the check it claimed every
  job, moved each `next_run_at` two hours past the grid, and the others then ran nothing).
- Behind: it corrects no row at its start, and no `(job_id, scheduled_for)` runs twice
  (without the check it moved every row into a new generation, and each instant then ran
  once per generation).
- Either way: one WARNING names the offset, and the membership row shows it.

Waits are for events (runs recorded), never for an interleaving.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched.testing import FakeClock, ShiftedClock
from tests.support.helpers import TIMEOUT, db_sql, wait_until
from tests.support.race_jobs import RECORD
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import Run

pytestmark = [pytest.mark.slow]

SHIFT: Final = 7200.0  # seconds: the finding's two hours
JOBS: Final = [f"j{i}" for i in range(12)]
INTERVAL: Final = 0.3
OPTIONS: Final = {"lease_seconds": 3.0, "heartbeat_seconds": 0.5, "pickup_seconds": 0.2, "workers": 4}
SLACK: Final = 2.0  # seconds: a slot recorded further than this from the real time is on a wrong clock


class Cluster:
    """Schedulers on one database, each shut down at teardown whatever happened."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.members: dict[str, JobScheduler] = {}

    def start(self, name: str, shift: float = 0.0) -> JobScheduler:
        clock = ShiftedClock(shift) if shift else None
        sched = JobScheduler(self.url, clock=clock, instance_id=name, **OPTIONS)  # type: ignore[arg-type]
        self.members[name] = sched
        sched.start()
        return sched

    def stop(self, name: str) -> None:
        self.members.pop(name).shutdown(wait=True, timeout=TIMEOUT)

    def close(self) -> None:
        for sched in self.members.values():
            sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def cluster(db_url: str) -> Iterator[Cluster]:
    made = Cluster(db_url)
    try:
        yield made
    finally:
        made.close()


def ran(sched: JobScheduler) -> list[Run]:
    """Every recorded run of every job (outcome "ok"), read through `sched`."""
    return [run for job_id in JOBS for run in sched.runs(job_id, limit=10_000) if run.outcome == "ok"]


def counts(sched: JobScheduler) -> Counter[str]:
    """How many runs each job has recorded."""
    return Counter(run.job_id for run in ran(sched))


def ran_more(sched: JobScheduler, before: Counter[str], times: int) -> bool:
    """Whether each job has recorded `times` more runs than `before`."""
    now = counts(sched)
    return all(now[job_id] >= before[job_id] + times for job_id in JOBS)


def ran_there(sched: JobScheduler, name: str) -> bool:
    return any(run.instance_id == name for run in ran(sched))


def schedule_all(sched: JobScheduler) -> None:
    for job_id in JOBS:
        sched.schedule(job_id, RECORD, INTERVAL, args=(job_id,), start_in=0)


def skew_warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("persched") and f"instance {name}:" in r.getMessage()
    ]


def offsets(url: str) -> dict[str, float | None]:
    return {
        str(name): offset
        for name, offset in db_sql(url, "SELECT instance_id, clock_offset_seconds FROM persched_instances")
    }


def test_an_instance_ahead_takes_only_its_share_on_the_grid(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    a = cluster.start("a")
    cluster.start("b")
    schedule_all(a)
    wait_until(lambda: ran_more(a, Counter(), 1), message="every job ran once")
    cluster.start("ahead", SHIFT)
    wait_until(lambda: ran_there(a, "ahead"), message="the instance ahead ran a job")
    # No slot on the wrong clock: not the two hours ahead it believed.
    late = time.time() + SLACK
    assert [run for run in ran(a) if run.scheduled_for.timestamp() > late] == []
    before = counts(a)
    wait_until(lambda: ran_more(a, before, 3), message="every job ran 3 times more")
    runs = ran(a)
    assert set(Counter(run.instance_id for run in runs)) == {"a", "b", "ahead"}  # shared, not taken over
    late = time.time() + SLACK
    assert [run for run in runs if run.scheduled_for.timestamp() > late] == []
    for job_id in JOBS:
        job = a.get_job(job_id)
        assert job is not None
        assert job.next_run_at.timestamp() < late + INTERVAL, job  # no row moved past the grid
        assert job.generation == 1, job
    shown = offsets(cluster.url)
    assert abs((shown["ahead"] or 0.0) - SHIFT) < SLACK, shown
    assert abs(shown["a"] or 0.0) < SLACK, shown
    assert len(skew_warnings(caplog, "ahead")) == 1, skew_warnings(caplog, "ahead")
    assert "ahead of the database's clock" in skew_warnings(caplog, "ahead")[0]
    assert skew_warnings(caplog, "a") == skew_warnings(caplog, "b") == []


def test_the_others_go_on_after_an_instance_ahead_leaves(cluster: Cluster) -> None:
    a = cluster.start("a")
    cluster.start("b")
    cluster.start("ahead", SHIFT)
    schedule_all(a)
    wait_until(lambda: ran_more(a, Counter(), 1) and ran_there(a, "ahead"), message="every job ran, some ahead")
    cluster.stop("ahead")
    before = counts(a)
    wait_until(lambda: ran_more(a, before, 2), message="every job ran twice more after the instance ahead left")


def test_an_instance_behind_corrects_nothing_and_no_instant_runs_twice(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    a = cluster.start("a")
    cluster.start("b")
    schedule_all(a)
    # Each row's grid has moved past its first slot: what the start-up correction looks for.
    wait_until(lambda: ran_more(a, Counter(), 2), message="every job ran twice")
    joined = time.time()
    cluster.start("behind", -SHIFT)
    before = counts(a)
    wait_until(lambda: ran_more(a, before, 3) and ran_there(a, "behind"), message="every job ran 3 times more")
    runs = ran(a)
    twice = [key for key, n in Counter((run.job_id, run.scheduled_for) for run in runs).items() if n > 1]
    assert twice == []
    assert {run.generation for run in runs} == {1}  # no row corrected into a new generation
    early = joined - SLACK - INTERVAL
    assert [run for run in runs if run.instance_id == "behind" and run.scheduled_for.timestamp() < early] == []
    assert "further ahead than its schedule allows" not in caplog.text
    assert len(skew_warnings(caplog, "behind")) == 1, skew_warnings(caplog, "behind")
    assert "behind the database's clock" in skew_warnings(caplog, "behind")[0]


def test_the_database_clock_is_read_and_every_offset_shown(cluster: Cluster) -> None:
    sched = cluster.start("a")
    assert abs(store_of(sched).server_time() / 1e6 - time.time()) < SLACK
    offset = offsets(cluster.url)["a"]
    assert offset is not None  # measured (an offset of exactly 0.0 is one: SQLite reads its clock to the ms)
    assert abs(offset) < SLACK


def test_a_fake_clock_is_never_compared_with_the_database(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="persched")
    clock = FakeClock(1_700_000_000.25)  # years from the database's clock
    with JobScheduler(db_url, clock=clock, instance_id="fake") as sched:
        sched.schedule("j", RECORD, 60.0, args=("j",))
        clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
        [run] = sched.runs("j")
        assert run.scheduled_for.timestamp() == 1_700_000_060.25
        assert offsets(db_url) == {"fake": None}
    assert caplog.records == []
