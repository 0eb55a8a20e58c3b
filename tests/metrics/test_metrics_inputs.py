"""`SchedulerMetrics` refuses bad options and wiring with a one-line `InvalidJobError` naming the argument.

Nothing is registered when an option is refused, nor left registered by a
`serve()` that fails; attaching twice counts each run once, and an attach the
scheduler refused leaves the metrics free to attach. The tests that run a scheduler run on every engine (SQLite,
PostgreSQL, MariaDB), with a FakeClock at an odd instant.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Final, cast

import pytest

pytest.importorskip("prometheus_client")  # the extra: persched[metrics]

from prometheus_client import CollectorRegistry, Counter

from persched import AsyncJobScheduler, JobScheduler
from persched import metrics as metrics_module
from persched._interfaces.http.server import Server
from persched.errors import InvalidJobError
from persched.metrics import SchedulerMetrics
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT

START: Final = 1_700_000_000.123457
RECORD: Final = "tests.support.jobs:record"

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_attaching_metrics_twice_counts_each_run_once(db_url: str, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    sched = JobScheduler(db_url, clock=clock)
    try:
        assert metrics.attach(sched) is metrics
        assert metrics.attach(sched) is metrics  # idempotent: no second listener
        sched.schedule("job", RECORD, 10.0, args=("job",))
        sched.start()
        for _ in range(4):
            clock.advance(10)
            assert sched.wait_idle(TIMEOUT)
        recorded = len(sched.runs("job"))
        assert recorded == 4
        assert sample(registry, "persched_runs_started_total") == recorded
        assert sample(registry, "persched_runs_total", outcome="ok") == recorded
        assert sample(registry, "persched_run_lateness_seconds_count") == recorded
        other = JobScheduler(db_url, clock=clock, namespace="other")
        try:
            with pytest.raises(InvalidJobError, match="another scheduler") as raised:
                metrics.attach(other)
            assert raised.value.argument == "scheduler"
        finally:
            other.shutdown()
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_metrics_attach_to_the_async_front_end_once(db_url: str, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, jobs_cache_seconds=0)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as front:
            metrics.attach(front)
            metrics.attach(front.scheduler)  # the same scheduler: nothing more
            await front.schedule("job", RECORD, 5.0, args=("job",))
            clock.advance(5)
            assert await front.wait_idle(TIMEOUT)
            assert sample(registry, "persched_runs_total", outcome="ok") == 1
            assert sample(registry, "persched_jobs", state="scheduled") == 1  # read through its store

    asyncio.run(asyncio.wait_for(scenario(), 3 * TIMEOUT))
    assert len(jobs.calls("job")) == 1


@pytest.mark.parametrize(
    ("argument", "options"),
    [
        ("lateness_buckets", {"lateness_buckets": [math.nan]}),
        ("lateness_buckets", {"lateness_buckets": []}),
        ("lateness_buckets", {"lateness_buckets": [5, 1]}),
        ("lateness_buckets", {"lateness_buckets": [1, 1]}),
        ("lateness_buckets", {"lateness_buckets": ["a"]}),
        ("lateness_buckets", {"lateness_buckets": None}),
        ("lateness_buckets", {"lateness_buckets": "0.1"}),
        ("lateness_buckets", {"lateness_buckets": [True]}),
        ("lateness_buckets", {"lateness_buckets": [math.inf]}),
        ("lateness_buckets", {"lateness_buckets": [1, math.inf, 2]}),
        ("duration_buckets", {"duration_buckets": [-1, 1]}),
        ("duration_buckets", {"duration_buckets": [1, 10**400]}),
        ("duration_buckets", {"duration_buckets": 5}),
        ("per_job", {"per_job": "yes"}),
        ("per_job", {"per_job": 1}),
        ("namespace", {"namespace": "bad-name"}),
        ("namespace", {"namespace": ""}),
        ("namespace", {"namespace": "9lives"}),
        ("namespace", {"namespace": None}),
        ("registry", {"registry": "x"}),
        ("jobs_cache_seconds", {"jobs_cache_seconds": -1}),
        ("jobs_cache_seconds", {"jobs_cache_seconds": math.nan}),
        pytest.param("jobs_cache_seconds", {"jobs_cache_seconds": 10**400}, id="jobs_cache_seconds-10**400"),
        ("jobs_cache_seconds", {"jobs_cache_seconds": 1e300}),
        ("jobs_cache_seconds", {"jobs_cache_seconds": 11 * 366 * 24 * 3600}),
    ],
    ids=lambda v: v if isinstance(v, str) else repr(next(iter(v.values()))),
)
def test_metrics_options_are_checked(argument: str, options: dict[str, Any]) -> None:
    registry = CollectorRegistry()
    given = {"registry": registry, **options}
    with pytest.raises(InvalidJobError) as raised:
        SchedulerMetrics(**given)
    assert raised.value.argument == argument
    assert "\n" not in str(raised.value)
    assert list(registry.collect()) == []  # nothing registered


def test_accepted_bucket_forms() -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry, lateness_buckets=(0, 0.5, 2), duration_buckets=[1, 60, math.inf])
    metrics.duration.labels("ok").observe(30.0)
    bounds = {"0.0", "0.5", "2.0", "+Inf"}
    assert {s.labels["le"] for s in next(iter(metrics.lateness.collect())).samples if "le" in s.labels} == bounds
    assert [
        sample(registry, "persched_run_duration_seconds_bucket", outcome="ok", le=le) for le in ("1.0", "60.0", "+Inf")
    ] == [0, 1, 1]


def test_a_second_metrics_on_one_registry_is_refused_and_the_first_is_kept(db_url: str, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    first = SchedulerMetrics(registry)
    with pytest.raises(InvalidJobError, match="one SchedulerMetrics per registry") as raised:
        SchedulerMetrics(registry)
    assert raised.value.argument == "registry"
    assert "\n" not in str(raised.value)
    SchedulerMetrics(registry, namespace="second")  # another prefix fits beside it
    sched = JobScheduler(db_url, clock=clock)
    try:
        first.attach(sched)
        sched.schedule("job", RECORD, 10.0, args=("job",))
        sched.start()
        clock.advance(10)
        assert sched.wait_idle(TIMEOUT)
        assert sample(registry, "persched_runs_total", outcome="ok") == 1
        assert sample(registry, "second_runs_total", outcome="ok") == 0
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_a_clash_with_an_applications_own_metric_registers_nothing() -> None:
    registry = CollectorRegistry()
    Counter("persched_lease_recoveries", "the application's own", registry=registry)
    with pytest.raises(InvalidJobError) as raised:
        SchedulerMetrics(registry)
    assert raised.value.argument == "registry"
    assert [family.name for family in registry.collect()] == ["persched_lease_recoveries"]  # the others undone


@pytest.mark.parametrize("scheduler", [None, "sched", 5])
def test_attach_refuses_what_is_not_a_scheduler(scheduler: object) -> None:
    metrics = SchedulerMetrics(CollectorRegistry())
    with pytest.raises(InvalidJobError) as raised:
        metrics.attach(scheduler)  # type: ignore[arg-type]  # the point
    assert raised.value.argument == "scheduler"


def test_serve_closes_its_socket_when_its_metrics_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second `serve` in one process finds the registry taken: the error, and no listening socket left."""
    servers: list[Server] = []

    class Recorded(Server):
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Server's own
            super().__init__(*args, **kwargs)
            servers.append(self)

    def refused(*args: object, **kwargs: object) -> SchedulerMetrics:
        raise InvalidJobError("registry", "one SchedulerMetrics per registry")

    monkeypatch.setattr(metrics_module, "Server", Recorded)
    monkeypatch.setattr(metrics_module, "SchedulerMetrics", refused)
    with pytest.raises(InvalidJobError, match="one SchedulerMetrics per registry"):
        metrics_module.serve(cast("JobScheduler", None), "127.0.0.1", 0)
    assert [server.socket.fileno() for server in servers] == [-1]  # closed


@pytest.mark.parametrize("refuses", ["attach", "after-attach"])
def test_a_serve_that_fails_leaves_the_registry_as_it_was(monkeypatch: pytest.MonkeyPatch, refuses: str) -> None:
    """The fresh metrics `serve` registered are taken off again: a later serve() in this process can register."""
    registry = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY, which serve() uses
    Counter("app_requests", "the application's own", registry=registry)
    monkeypatch.setattr(metrics_module, "REGISTRY", registry)
    before = sorted(family.name for family in registry.collect())
    scheduler: object = None  # a wrong argument: attach() refuses it
    if refuses == "after-attach":
        scheduler = JobScheduler("sqlite://", clock=FakeClock(START))

        def refused(*args: object) -> None:
            raise RuntimeError("the server's app cannot be made")

        monkeypatch.setattr(metrics_module, "HostCheck", refused)
    try:
        with pytest.raises((InvalidJobError, RuntimeError)):
            metrics_module.serve(cast("JobScheduler", scheduler), "127.0.0.1", 0)
        assert sorted(family.name for family in registry.collect()) == before
    finally:
        if isinstance(scheduler, JobScheduler):
            scheduler.shutdown(wait=True, timeout=TIMEOUT)


def test_an_attach_the_scheduler_refuses_leaves_the_metrics_unattached(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = SchedulerMetrics(CollectorRegistry())
    sched = JobScheduler("sqlite://", clock=FakeClock(START))
    try:

        def refused(*args: object) -> None:
            raise RuntimeError("refused, as in a forked child")

        with monkeypatch.context() as patched:
            patched.setattr(sched, "add_listener", refused)
            with pytest.raises(RuntimeError, match="refused"):
                metrics.attach(sched)
        metrics.attach(sched)  # attaches now: not taken for attached already
        assert sched.remove_listener(metrics._on_event)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
