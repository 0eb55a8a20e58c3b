"""persched_run_retries_total, and lateness observed for first attempts only, scraped over HTTP.

Time comes from a FakeClock at an odd instant; `wait_idle()` waits for the
runs and their events, so a scrape afterwards sees every count. "flaky"
fails its first two attempts of a slot and succeeds at the third; its
retries start 10 s and 30 s after their slot, on purpose: that is no lateness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("prometheus_client")  # the extra: persched[metrics]


from persched._model.instant import from_datetime
from persched.metrics import SchedulerMetrics
from persched.testing import FakeClock
from tests.metrics.test_metrics import START, scrape, value
from tests.support.attempts import retried_slot

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from persched import JobScheduler
    from tests.conftest import SchedulerFactory


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def _run_the_slot(sched: JobScheduler, clock: FakeClock) -> None:
    """Run "flaky"'s first slot to its end: attempt 2 is due 10 s after the first ended, attempt 3 20 s
    after the second."""
    retried_slot(sched, clock, "plain", (10.0, 20.0))
    assert sorted(run.attempt for run in sched.runs("flaky")) == [1, 2, 3]


def test_retries_are_counted_and_only_first_attempts_are_late(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry).attach(sched)
    _run_the_slot(sched, clock)

    samples = scrape(endpoint)
    assert value(samples, "persched_run_retries_total") == 2  # attempts 2 and 3
    assert value(samples, "persched_runs_started_total") == 4  # every attempt is a run
    assert value(samples, "persched_runs_total", outcome="error") == 2
    assert value(samples, "persched_runs_total", outcome="ok") == 2
    assert value(samples, "persched_run_duration_seconds_count", outcome="error") == 2
    # Lateness: the two first attempts only, summed exactly as the history has them.
    firsts = [run for job in ("flaky", "plain") for run in sched.runs(job) if run.attempt == 1]
    assert len(firsts) == 2
    assert value(samples, "persched_run_lateness_seconds_count") == 2
    lateness = sum(from_datetime(run.started_at) - from_datetime(run.scheduled_for) for run in firsts)
    assert value(samples, "persched_run_lateness_seconds_sum") == pytest.approx(lateness / 1e6, abs=1e-6)
    assert value(samples, "persched_run_lateness_seconds_bucket", le="5.0") == 2  # the retries' 10 s and 30 s: none


def test_retries_per_job(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry, per_job=True).attach(sched)
    _run_the_slot(sched, clock)

    samples = scrape(endpoint)
    assert value(samples, "persched_run_retries_total", job="flaky") == 2
    assert value(samples, "persched_run_retries_total", job="plain") == 0
    assert value(samples, "persched_run_lateness_seconds_count", job="flaky") == 1
    assert value(samples, "persched_runs_started_total", job="flaky") == 3
