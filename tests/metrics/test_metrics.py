"""persched.metrics, tested by scraping a real HTTP endpoint.

Time comes from a FakeClock at an odd instant; `wait_idle()` waits for the
runs and their events, so a scrape afterwards sees every count.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import urllib.request
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

pytest.importorskip("prometheus_client")  # the extra: persched[metrics]

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._store import Store
from persched._store import db as _db
from persched._store.observer import Observer
from persched.errors import StoreError
from persched.metrics import SchedulerMetrics
from persched.testing import FakeClock
from tests.support import stop_jobs
from tests.support.helpers import TIMEOUT
from tests.support.seams import store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import SchedulerFactory

START = 1_700_000_000.123457  # an odd instant: sub-second, not a round number

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def test_runs_by_outcome_lateness_duration_and_jobs_by_state(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry, jobs_cache_seconds=0).attach(sched)
    sched.schedule("good", "tests.support.jobs:record", 10.0, args=("good",))
    sched.schedule("bad", "tests.support.jobs:fail", 10.0, args=("bad", "boom"))
    sched.schedule("idle", "tests.support.jobs:record", 3600.0, args=("idle",))
    sched.start()
    for _ in range(3):
        clock.advance(10)
        assert sched.wait_idle(TIMEOUT)
    assert sched.pause("idle")

    samples = scrape(endpoint)
    assert value(samples, "persched_runs_started_total") == 6
    assert value(samples, "persched_runs_total", outcome="ok") == 3
    assert value(samples, "persched_runs_total", outcome="error") == 3
    assert value(samples, "persched_run_lateness_seconds_count") == 6
    assert value(samples, "persched_run_duration_seconds_count", outcome="ok") == 3
    assert value(samples, "persched_run_duration_seconds_count", outcome="error") == 3
    assert value(samples, "persched_jobs", state="scheduled") == 2
    assert value(samples, "persched_jobs", state="paused") == 1
    assert value(samples, "persched_runs_in_flight") == 0
    assert value(samples, "persched_events_dropped_total") == 0
    # Lateness is started_at - scheduled_for, exactly as recorded in the history.
    lateness = sum(
        from_datetime(r.started_at) - from_datetime(r.scheduled_for) for job in ("good", "bad") for r in sched.runs(job)
    )
    assert value(samples, "persched_run_lateness_seconds_sum") == pytest.approx(lateness / 1e6, abs=1e-6)
    # Low cardinality by default: no series carries a job label.
    assert not [key for key in samples if any(label == "job" for label, _ in key[1])]


def test_per_job_labels_are_opt_in(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry, per_job=True).attach(sched)
    sched.schedule("a", "tests.support.jobs:record", 5.0, args=("a",))
    sched.schedule("b", "tests.support.jobs:record", 10.0, args=("b",))
    sched.start()
    for _ in range(2):
        clock.advance(10)
        assert sched.wait_idle(TIMEOUT)
    samples = scrape(endpoint)
    # Both slots of "a" at 5 s and 10 s: the first advance runs one, coalescing nothing.
    runs_a = len(sched.runs("a"))
    assert value(samples, "persched_runs_total", outcome="ok", job="a") == runs_a
    assert value(samples, "persched_runs_total", outcome="ok", job="b") == 2
    assert value(samples, "persched_run_lateness_seconds_count", job="b") == 2


def test_missed_slots_match_the_history(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry).attach(sched)
    sched.schedule("skipper", "tests.support.jobs:record", 10.0, args=("s",), misfire="skip")
    sched.start()
    clock.advance(45)  # slots at 10, 20, 30, 40 passed at once: misfire "skip" drops the late ones
    assert sched.wait_idle(TIMEOUT)
    missed = [r for r in sched.runs("skipper") if r.outcome == "missed"]
    assert missed, "the test needs a missed record"
    samples = scrape(endpoint)
    assert value(samples, "persched_missed_records_total") == len(missed)
    assert value(samples, "persched_missed_slots_total") == sum(r.missed_count or 0 for r in missed)


def test_claim_conflict_is_counted(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str, sqlite_url: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry).attach(sched)
    job = sched.schedule("contended", "tests.support.jobs:record", 10.0, args=("c",))
    sched.start()
    # Another instance claims the slot first (through the store, as its dispatcher would).
    other = Store(_db.make_engine(sqlite_url), sqlite_url)
    try:
        due = from_datetime(job.next_run_at)
        won = claim_one(other, "contended", job.generation, due, due, "other-instance", Micros(micros(30)))
        assert won.__class__.__name__ == "Claim"
    finally:
        other.engine.dispose()
    clock.advance(10)
    assert sched.wait_idle(TIMEOUT)
    samples = scrape(endpoint)
    assert value(samples, "persched_claim_conflicts_total") == 1
    assert value(samples, "persched_runs_started_total") == 0


class _Recorder(Observer):
    def __init__(self) -> None:
        self.retries: list[str] = []
        self.errors: list[str] = []

    def store_retry(self, operation: str) -> None:
        self.retries.append(operation)

    def store_error(self, operation: str) -> None:
        self.errors.append(operation)


def test_store_retries_and_errors_reach_the_observer(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}"
    engine = _db.make_engine(url, busy_timeout_seconds=0.01)
    from persched._store import migrate as _migrate

    _migrate.upgrade(engine)
    store = Store(engine, url, retry_attempts=3)
    store.observer = recorder = _Recorder()
    holder = sqlite3.connect(path, isolation_level=None, timeout=TIMEOUT)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock throughout
        with pytest.raises(StoreError):
            store.deschedule_job("nobody", Instant(micros(START)))
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        engine.dispose()
    assert recorder.retries == ["deschedule", "deschedule"]
    assert recorder.errors == ["deschedule"]


def test_store_errors_are_scraped(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    metrics = SchedulerMetrics(registry)
    sched = make_scheduler(clock=clock)
    metrics.attach(sched)
    metrics.store_retry("claim")
    metrics.store_error("claim")
    samples = scrape(endpoint)
    assert value(samples, "persched_store_retries_total", operation="claim") == 1
    assert value(samples, "persched_store_errors_total", operation="claim") == 1


def test_registers_on_a_describing_registry_like_the_default() -> None:
    # prometheus_client.REGISTRY collects a collector when it is registered (auto_describe).
    SchedulerMetrics(CollectorRegistry(auto_describe=True))


def test_a_second_registration_on_one_registry_is_refused(registry: CollectorRegistry) -> None:
    SchedulerMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        SchedulerMetrics(registry)


def test_the_core_works_without_prometheus_client(tmp_path: Path) -> None:
    code = f"""
import sys
sys.modules["prometheus_client"] = None  # as if the extra were not installed
from persched import JobScheduler
from persched.testing import FakeClock
clock = FakeClock({START})
with JobScheduler({str(tmp_path / "core.db")!r}, clock=clock) as sched:
    sched.schedule("j", "tests.support.jobs:record", 1.0, args=("j",))
    clock.advance(1)
    assert sched.wait_idle(10)
    assert [r.outcome for r in sched.runs("j")] == ["ok"]
try:
    import persched.metrics
except ImportError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "pip install 'persched[metrics]'" in done.stdout


class _MissedRecorder(Observer):
    def __init__(self) -> None:
        self.missed: list[tuple[str, int | None]] = []
        self.retries: list[str] = []

    def slots_missed(self, job_id: str, slots: int | None) -> None:
        self.missed.append((job_id, slots))

    def store_retry(self, operation: str) -> None:
        self.retries.append(operation)


def test_a_retried_claim_counts_its_missed_slots_once(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(clock=clock)
    recorder = _MissedRecorder()
    sched.set_observer(recorder)
    sched.schedule("skipper", "tests.support.jobs:record", 10.0, args=("s",), misfire="skip")
    sched.start()
    dialect = store_of(sched).engine.dialect
    real_commit = dialect.do_commit
    armed = [True]

    def commit_fails_once(dbapi_connection: Any) -> None:  # noqa: ANN401 - a DB-API connection
        if armed[0] and threading.current_thread().name == "persched-dispatcher":
            armed[0] = False  # the dispatcher's claim: as if SQLite were busy past its timeout
            raise sqlite3.OperationalError("database is locked")
        real_commit(dbapi_connection)

    with patch.object(dialect, "do_commit", commit_fails_once):
        clock.advance(45)  # the claim that records the missed range fails at commit, then is retried
        assert sched.wait_idle(TIMEOUT)
    assert not armed[0], "the seam never fired"
    assert recorder.retries, "the failed commit was not retried"
    missed = [r for r in sched.runs("skipper") if r.outcome == "missed"]
    assert len(missed) == 1
    assert recorder.missed == [("skipper", missed[0].missed_count)]


def test_stopped_runs_are_counted_by_outcome_and_apart(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, endpoint: str
) -> None:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry).attach(sched)
    sched.schedule("stops", "tests.support.stop_jobs:thread_cooperate", 10.0, args=("metrics-stops",))
    sched.start()
    clock.advance(10)
    assert stop_jobs.started_event("metrics-stops").wait(TIMEOUT)
    assert sched.cancel("stops")
    assert sched.wait_idle(TIMEOUT)
    samples = scrape(endpoint)
    assert value(samples, "persched_runs_total", outcome="stopped") == 1
    assert value(samples, "persched_runs_stopped_total") == 1
    assert value(samples, "persched_run_duration_seconds_count", outcome="stopped") == 1
