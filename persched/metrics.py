"""Prometheus metrics of a running scheduler (the optional extra ``persched[metrics]``).

::

    from prometheus_client import start_http_server
    from persched.metrics import SchedulerMetrics

    metrics = SchedulerMetrics()          # registers on prometheus_client.REGISTRY
    metrics.attach(scheduler)             # before or after scheduler.start()
    start_http_server(9464, addr="127.0.0.1")

or ``persched run --import myapp.jobs --metrics-port 9464``. docs/observability.md lists every
metric, its labels, and what feeds it. Each process counts what it did: sum over instances in PromQL.

Threads: events are counted on the ``persched-events`` thread, the observer hook on persched's
threads; the series read from the database at scrape time are cached for `jobs_cache_seconds`.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, TypeVar, cast

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, make_wsgi_app
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "persched.metrics needs prometheus_client: pip install 'persched[metrics]'", name=exc.name
    ) from exc

from . import _realtime
from ._interfaces.http.hosts import HostCheck, HostRules, allow_every_host_warning
from ._interfaces.http.server import Limits, Server
from ._model.checks import as_seconds
from ._model.instant import from_datetime, micros, seconds
from ._model.models import shown
from ._store import health as _health
from ._store import views as _views
from ._store.observer import Observer
from .errors import InvalidJobError, PerschedError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

    from prometheus_client.metrics_core import Metric

    from ._engine.events import Event, EventKind
    from ._engine.internals import Internals
    from ._engine.scheduler import JobScheduler
    from ._interfaces.async_front import AsyncJobScheduler

__all__ = ["DURATION_BUCKETS", "LATENESS_BUCKETS", "SchedulerMetrics", "serve"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds from a run's slot to its start (jitter included); first attempts only, a retry is late on purpose.
LATENESS_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: Seconds from a run's start to its end.
DURATION_BUCKETS: Final = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0)
JOBS_CACHE_SECONDS: Final = 5.0  # jobs-by-state is read from the database at most this often
#: The endpoint's server: scrapes are GETs, a few at a time.
METRICS_LIMITS: Final = Limits(workers=2, max_connections=64, max_body_bytes=1_024)

_RUN_KINDS: Final[tuple[EventKind, ...]] = ("run_started", "run_finished", "run_failed", "run_stopped", "run_lost")
_OUTCOME_OF: Final[dict[str, str]] = {"run_finished": "ok", "run_failed": "error", "run_stopped": "stopped"}
_MAX_BOUND: Final = 1e300  # seconds: the largest finite bucket bound (an int beyond any float is refused)
_METRIC_PREFIX: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # Prometheus names, without the colons of rules
# With per_job, a gauge of each job's timestamps: (its name's part, its index in job_timestamps' pair, its help).
_JOB_TIMESTAMPS: Final = (
    ("next_run", 0, "When the job's next run is due (unix seconds); none while paused or finished."),
    ("last_success", 1, "When the job's latest run that ended 'ok' ended (unix seconds)."),
)


def _buckets(argument: str, buckets: object) -> tuple[float, ...]:
    """Return `buckets` as a histogram takes them (numbers >= 0, increasing), or raise InvalidJobError."""
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Iterable):
        raise InvalidJobError(argument, f"must be a sequence of seconds such as (0.1, 1.0, 10.0), got {shown(buckets)}")
    values = list(buckets)
    bounds: list[float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:  # NaN
            raise InvalidJobError(argument, f"must hold numbers of seconds >= 0, got {shown(value)}")
        if _MAX_BOUND < value < math.inf:  # compared before float(): 10**400 raises no OverflowError
            raise InvalidJobError(
                argument, f"must hold bounds of at most {_MAX_BOUND:g} s (or +Inf), got {shown(value)}"
            )
        bounds.append(float(value))
    # Increasing also puts a given +Inf last, where prometheus_client takes it.
    if any(later <= earlier for earlier, later in itertools.pairwise(bounds)):
        raise InvalidJobError(argument, f"must be in increasing order, each bound once, got {shown(values)}")
    if not bounds or bounds[0] == math.inf:
        raise InvalidJobError(argument, f"must hold at least one finite bound, got {shown(values)}")
    return tuple(bounds)


class SchedulerMetrics(Observer):
    """The metrics of one `JobScheduler`, registered on a Prometheus registry.

    Args:
        registry: Where to register (default ``prometheus_client.REGISTRY``).
        per_job: Add a ``job`` label to the per-run metrics (one series per job: for a few jobs only).
        namespace: The metric name prefix: letters, digits and underscores, not starting with a digit.
        lateness_buckets: Histogram buckets of lateness, in seconds: numbers >= 0 in increasing order
            (``+Inf`` is added by itself).
        duration_buckets: Histogram buckets of run duration, in seconds (as `lateness_buckets`).
        jobs_cache_seconds: How long what is read from the database at scrape time is reused, in
            seconds (0: read at every scrape; at most 10 years).

    Raises:
        InvalidJobError: An option is not acceptable, or `registry` already holds metrics of these
            names (one `SchedulerMetrics` per registry and namespace); nothing is registered then.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        per_job: bool = False,
        namespace: str = "persched",
        lateness_buckets: Sequence[float] = LATENESS_BUCKETS,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        jobs_cache_seconds: float = JOBS_CACHE_SECONDS,
    ) -> None:
        cache = as_seconds("jobs_cache_seconds", jobs_cache_seconds, allow_zero=True)  # >= 0, at most 10 years
        if registry is not None and not isinstance(registry, CollectorRegistry):
            raise InvalidJobError(
                "registry",
                f"must be a prometheus_client CollectorRegistry, or None for the default; got {shown(registry)}",
            )
        if not isinstance(per_job, bool):
            raise InvalidJobError("per_job", f"must be True or False, got {shown(per_job)}")
        prefix: object = namespace  # typed str, checked as anything
        if not isinstance(prefix, str) or not _METRIC_PREFIX.fullmatch(prefix):
            raise InvalidJobError(
                "namespace",
                f"must be a metric name prefix such as 'persched' (letters, digits and _, "
                f"not starting with a digit), got {shown(namespace)}",
            )
        lateness = _buckets("lateness_buckets", lateness_buckets)
        durations = _buckets("duration_buckets", duration_buckets)
        self.registry: Final = REGISTRY if registry is None else registry
        self.per_job: Final = per_job
        self._cache_ns = micros(cache) * 1_000  # monotonic_ns() compares with it
        job = ("job",) if per_job else ()
        made: list[Collector] = []  # unregistered, then registered together: a clash leaves the registry as it was

        def counter(name: str, doc: str, labels: Sequence[str] = job) -> Counter:
            made.append(metric := Counter(name, doc, labels, namespace=namespace, registry=None))
            return metric

        def histogram(name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> Histogram:
            made.append(metric := Histogram(name, doc, labels, buckets=buckets, namespace=namespace, registry=None))
            return metric

        self.runs_started = counter("runs_started", "Runs whose claim committed (they started).")
        self.runs = counter(
            "runs",
            "Runs that ended, by outcome: ok, error, stopped, lost (recorded by this instance).",
            ("outcome", *job),
        )
        self.lateness = histogram(
            "run_lateness_seconds",
            "Seconds from a run's slot (scheduled_for) to its start (started_at).",
            job,
            lateness,
        )
        self.duration = histogram(
            "run_duration_seconds",
            "Seconds from a run's start to its end, by outcome (ok, error, stopped).",
            ("outcome", *job),
            durations,
        )
        self.runs_stopped = counter(
            "runs_stopped", "Runs that ended when asked to stop (max runtime, cancel, shutdown); also in runs_total."
        )
        self.run_retries = counter(
            "run_retries", "Attempts past the first of a slot (retries) that started; also in runs_started_total."
        )
        self.missed_slots = counter(
            "missed_slots", "Slots recorded as missed (not run); ranges too long to count add 0."
        )
        self.missed_records = counter(
            "missed_records", 'History records of outcome "missed" (each stands for a range of slots).'
        )
        self.claim_conflicts = counter(
            "claim_conflicts",
            "Claims that lost: another instance, or an older queue entry of this one, moved the job first.",
        )
        self.store_retries = counter(
            "store_retries", "Store transactions retried after a transient failure, by operation.", ("operation",)
        )
        self.store_errors = counter(
            "store_errors", "Store transactions that failed for good (StoreError), by operation.", ("operation",)
        )
        self.lease_recoveries = counter(
            "lease_recoveries", "Runs whose lease expired, recovered (recorded lost) by this instance.", ()
        )
        self._lock = threading.Lock()
        self._scheduler: JobScheduler | None = None
        self._internals: Internals | None = None  # the attached scheduler's, for what is read at scrape time
        self._caches: dict[str, tuple[int, object]] = {}  # what was read at scrape time: (monotonic ns, value)
        self._live = _LiveCollector(namespace, self)
        # Last: a registry that describes collectors (the default one) collects at once.
        self._collectors: Final = (*made, self._live)
        self._register(*self._collectors)

    def _register(self, *collectors: Collector) -> None:
        """Register every collector, or none: a name the registry holds already undoes the others."""
        done: list[Collector] = []
        try:
            for collector in collectors:
                self.registry.register(collector)
                done.append(collector)
        except ValueError as exc:  # prometheus_client: "Duplicated timeseries in CollectorRegistry: {...}"
            for collector in done:
                self.registry.unregister(collector)
            raise InvalidJobError(
                "registry",
                f"already holds metrics of these names ({exc}); make one SchedulerMetrics per registry, "
                "or pass another registry= or namespace=",
            ) from None

    def _unregister(self) -> None:
        """Take every collector off the registry again (`serve` that failed after registering)."""
        for collector in self._collectors:
            self.registry.unregister(collector)

    def attach(self, scheduler: JobScheduler | AsyncJobScheduler) -> SchedulerMetrics:
        """Feed these metrics from `scheduler` (its events and its observer hook); return self.

        Attaching again to the same scheduler changes nothing. An `AsyncJobScheduler` is counted
        through the threaded scheduler underneath.

        Raises:
            InvalidJobError: `scheduler` is not a scheduler, or these metrics count another already.
        """
        from ._engine.scheduler import JobScheduler, internals_of
        from ._interfaces.async_front import AsyncJobScheduler  # here: importing the metrics needs no scheduler module

        if isinstance(scheduler, AsyncJobScheduler):
            scheduler = scheduler.scheduler
        if not isinstance(scheduler, JobScheduler):
            raise InvalidJobError(
                "scheduler", f"must be a JobScheduler or an AsyncJobScheduler, got {shown(scheduler)}"
            )
        with self._lock:
            if self._scheduler is scheduler:
                return self  # attached already: a second listener would count every run twice
            if self._scheduler is not None:
                raise InvalidJobError("scheduler", "these metrics already count another scheduler; make a new one")
            internals = internals_of(scheduler)
            scheduler.add_listener(self._on_event, _RUN_KINDS)  # raises in a forked child: nothing is attached
            scheduler.set_observer(self)
            self._scheduler, self._internals = scheduler, internals
        return self

    def detach(self) -> None:
        """Stop counting; the series keep their values (scrapes still show them)."""
        with self._lock:
            scheduler, self._scheduler, self._internals = self._scheduler, None, None
            if scheduler is not None:
                scheduler.remove_listener(self._on_event)
                scheduler.set_observer(None)

    # Events, on the persched-events thread.

    def _on_event(self, event: Event) -> None:
        run = event.run
        job = (event.job_id,) if self.per_job else ()
        if event.kind == "run_started":
            (self.runs_started.labels(*job) if job else self.runs_started).inc()
            if run is not None and run.attempt > 1:  # a retry: its slot came long before, on purpose
                (self.run_retries.labels(*job) if job else self.run_retries).inc()
            elif run is not None:
                late = from_datetime(run.started_at) - from_datetime(run.scheduled_for)
                self._observe(self.lateness, job, seconds(max(late, 0)))
        elif event.kind == "run_lost":
            self.runs.labels("lost", *job).inc()
            self.lease_recoveries.inc()
        elif run is not None and run.finished_at is not None:
            outcome = _OUTCOME_OF[event.kind]
            self.runs.labels(outcome, *job).inc()
            if outcome == "stopped":
                (self.runs_stopped.labels(*job) if job else self.runs_stopped).inc()
            took = from_datetime(run.finished_at) - from_datetime(run.started_at)
            self._observe(self.duration, (outcome, *job), seconds(max(took, 0)))

    @staticmethod
    def _observe(histogram: Histogram, labels: tuple[str, ...], value: float) -> None:
        (histogram.labels(*labels) if labels else histogram).observe(value)

    # The observer hook, on persched's threads.

    def claim_conflict(self, job_id: str) -> None:
        (self.claim_conflicts.labels(job_id) if self.per_job else self.claim_conflicts).inc()

    def store_retry(self, operation: str) -> None:
        self.store_retries.labels(operation).inc()

    def store_error(self, operation: str) -> None:
        self.store_errors.labels(operation).inc()

    def slots_missed(self, job_id: str, slots: int | None) -> None:
        records = self.missed_records.labels(job_id) if self.per_job else self.missed_records
        records.inc()
        counted = self.missed_slots.labels(job_id) if self.per_job else self.missed_slots
        counted.inc(slots or 0)

    # Read at scrape time.

    def _cached(self, key: str, read: Callable[[Internals], T], what: str) -> T | None:
        """Return `read(internals)`, read at most once per `jobs_cache_seconds`; None (logged) if it failed."""
        internals = self._internals
        if internals is None:
            return None
        now = _realtime.monotonic_ns()
        cached = self._caches.get(key)
        if cached is not None and now - cached[0] < self._cache_ns:
            return cast("T", cached[1])
        try:
            value = read(internals)
        except StoreError as exc:
            logger.warning("metrics: cannot %s (series left out of this scrape): %s", what, exc)
            return None
        self._caches[key] = (now, value)
        return value

    def _health(self) -> tuple[int, dict[str, tuple[datetime | None, datetime | None]]] | None:
        """Return the live instances and, with `per_job`, each job's next run and latest success."""

        def read(internals: Internals) -> tuple[int, dict[str, tuple[datetime | None, datetime | None]]]:
            live = len(_health.live_instances(internals.store, internals.now()))
            return live, _health.job_timestamps(internals.store) if self.per_job else {}

        return self._cached("health", read, "read instances and job times")

    def _job_counts(self) -> dict[str, int] | None:
        return self._cached("jobs", lambda internals: _views.job_counts(internals.store), "count jobs by state")


class _LiveCollector(Collector):
    """The series read at scrape time: jobs by state, runs in flight, events dropped."""

    def __init__(self, namespace: str, metrics: SchedulerMetrics) -> None:
        self._namespace = namespace
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        scheduler = self._metrics._scheduler
        if scheduler is None:
            return
        name = self._namespace
        counts = self._metrics._job_counts()
        if counts is not None:
            by_state = GaugeMetricFamily(
                f"{name}_jobs", "Jobs not descheduled, by state (from the database).", labels=("state",)
            )
            for state, count in sorted(counts.items()):
                by_state.add_metric((state,), count)
            yield by_state
        health = self._metrics._health()
        if health is not None:
            live, stamps = health
            yield GaugeMetricFamily(
                f"{name}_instances_live",
                "Schedulers of this namespace whose lease is current (from the database; this one included).",
                live,
            )
            for kind, which, help_text in _JOB_TIMESTAMPS if self._metrics.per_job else ():
                family = GaugeMetricFamily(f"{name}_job_{kind}_timestamp_seconds", help_text, labels=("job",))
                for job_id, times in sorted(stamps.items()):
                    at = times[which]
                    if at is not None:
                        family.add_metric((job_id,), seconds(from_datetime(at)))
                yield family
        yield GaugeMetricFamily(
            f"{name}_runs_in_flight",
            "Runs this scheduler claimed and has not recorded yet.",
            scheduler.runs_in_flight(),
        )
        yield CounterMetricFamily(
            f"{name}_events_dropped",
            "Events dropped because listeners did not keep up (then run counts undercount).",
            scheduler.events_dropped,
        )


def serve(
    scheduler: JobScheduler, host: str, port: int, *, allowed_hosts: Sequence[str] = (), limits: Limits | None = None
) -> tuple[Server, threading.Thread]:
    """Attach fresh metrics on ``prometheus_client.REGISTRY`` and serve them at ``http://host:port/metrics``.

    For ``persched run --metrics-port``; an application with its own endpoint attaches
    `SchedulerMetrics` to its registry instead. Served by persched's bounded server behind its Host
    check: loopback names, the bound address (any IP address when bound to all), and
    `allowed_hosts` (``--metrics-allowed-host``). Stop it with ``shutdown()`` then ``server_close()``.

    Raises:
        PerschedError: The address cannot be bound, or an allowed host is malformed.
    """
    try:
        server = Server(host, port, limits=limits or METRICS_LIMITS, name="persched-metrics")
    except PerschedError as exc:
        raise PerschedError(f"--metrics-port: {exc}") from exc
    metrics: SchedulerMetrics | None = None
    # Whatever refuses (a host rule, the registry: a second serve, the scheduler), the socket is
    # closed and the registry left as it was, so that a later serve() in this process can register.
    try:
        rules = HostRules(host, server.server_port, allowed_hosts, "--metrics-allowed-host")
        metrics = SchedulerMetrics()
        metrics.attach(scheduler)
        allow_every_host_warning("metrics", allowed_hosts)
        server.app = HostCheck(make_wsgi_app(REGISTRY), rules, "metrics")
        thread = threading.Thread(target=server.serve_forever, name="persched-metrics", daemon=True)
        thread.start()
    except BaseException:
        if metrics is not None:
            metrics.detach()
            metrics._unregister()
        server.server_close()
        raise
    return server, thread
