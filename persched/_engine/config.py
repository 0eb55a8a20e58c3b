"""`JobScheduler`'s constructor options, checked once into a frozen `SchedulerConfig`.

`SchedulerConfig.checked` refuses a bad value with `InvalidJobError` naming the
argument, before anything is opened, and returns the values in persched's inner
units (whole microseconds, an exact `Clock`). The bounds (README, "Input limits")
are where a value becomes a typo that would overflow a datetime, a SQL integer or
a C timeout later. Pure: no threads, no locks, no I/O.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Final

from .._model.checks import positive
from .._model.instant import Micros, micros
from .._model.models import (
    MAX_INTERVAL_SECONDS,
    MAX_STORED_INT,
    check_encodable,
    shown,
    validate_namespace,
)
from .._model.targets import normalize_allowed
from .._store.migrate import DEFAULT_MIGRATION_TIMEOUT_SECONDS
from .._store.options import MAX_BUSY_TIMEOUT_SECONDS, EngineOptions, busy_timeout, synchronous_level
from ..clock import SystemClock, exact_clock
from ..errors import InvalidJobError
from .horizon import MIN_HORIZON_SECONDS
from .liveness import default_instance_id

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..clock import Clock, SecondsClock

__all__ = [
    "DEFAULT_KEEP_ERROR_RUNS",
    "DEFAULT_MAX_CLOCK_SKEW_SECONDS",
    "DEFAULT_MIGRATION_TIMEOUT_SECONDS",
    "DEFAULT_WORKERS",
    "SchedulerConfig",
    "check_share_work",
    "check_wait",
    "scheduler_options",
]

# PostgreSQL's lock_timeout and MySQL's GET_LOCK take milliseconds as a C int, as SQLite's busy timeout does.
MAX_MIGRATION_TIMEOUT_SECONDS: Final = MAX_BUSY_TIMEOUT_SECONDS
MAX_WORKERS: Final = 4096  # threads are made up front; beyond this, a typo would exhaust memory
DEFAULT_WORKERS: Final = 32  # docs/explanation/performance.md, "Choosing workers"
MAX_DURATION_SECONDS: Final = MAX_INTERVAL_SECONDS  # lease, heartbeat, pickup (check), retention: 10 years
MAX_TIMEOUT_SECONDS: Final = float(threading.TIMEOUT_MAX)  # shutdown / deschedule waits
MAX_COUNT: Final = MAX_STORED_INT  # keep_runs, runs(limit): SQL LIMIT / OFFSET values
MAX_ARGS_BYTES_LIMIT: Final = 64 * 1024 * 1024  # max_args_bytes itself: the store is not a blob store
# Synced hosts agree to milliseconds and a busy round trip takes part of a second: beyond, a wrong clock.
DEFAULT_MAX_CLOCK_SKEW_SECONDS: Final = 2.0
MAX_INSTANCE_ID_LENGTH: Final = 255  # characters: owner and instance_id are String(255)
DEFAULT_KEEP_ERROR_RUNS: Final = 1000  # a burst of successes never erases the last failures


def check_wait(wait: object, timeout: object) -> float | None:
    """Check the `wait` / `timeout` pair of deschedule() and shutdown()."""
    if not isinstance(wait, bool):
        raise InvalidJobError("wait", f"must be True or False, got {wait!r}")
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= MAX_TIMEOUT_SECONDS:
        raise InvalidJobError(
            "timeout", f"must be None or a number of seconds from 0 to {MAX_TIMEOUT_SECONDS:g}, got {shown(timeout)}"
        )
    return float(timeout)


def check_share_work(share_work: object, *, stacklevel: int) -> None:
    """Check the deprecated `share_work` option; False warns that it has no effect (at `stacklevel`)."""
    if not isinstance(share_work, bool):
        raise InvalidJobError("share_work", f"must be True or False, not {share_work!r}")
    if not share_work:
        warnings.warn(
            "share_work=False has no effect: instances always share the work (each job has one owner "
            "among the live instances); the option will be removed in the next minor release",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )


def _instance_id(instance_id: object) -> str:
    """Check a given `instance_id`: what the owner / instance_id columns can store (String(255))."""
    if not isinstance(instance_id, str) or not instance_id.strip():
        raise InvalidJobError("instance_id", f"must be a non-empty str, got {shown(instance_id)}")
    if len(instance_id) > MAX_INSTANCE_ID_LENGTH:
        raise InvalidJobError(
            "instance_id", f"must be at most {MAX_INSTANCE_ID_LENGTH} characters, got {len(instance_id)}"
        )
    check_encodable("instance_id", instance_id)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in instance_id):
        raise InvalidJobError("instance_id", f"must not contain control characters: {shown(instance_id)}")
    return instance_id


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """A `JobScheduler`'s options, checked; durations in whole microseconds. Build with `checked`."""

    url: str  # a SQLAlchemy URL or a plain path, parsed by persched._store.db.to_url
    workers: int
    clock: Clock
    instance_id: str
    lease: Micros
    heartbeat: Micros
    engine: EngineOptions
    keep_runs: int | None  # newest runs kept per job; None: no limit by count
    keep_for: Micros | None  # age beyond which finished runs are deleted; None: no limit by age
    keep_error_runs: int | None  # newest failed runs kept per job beside keep_runs; None: every one
    allowed_modules: tuple[str, ...] | None
    pickup: Micros
    pickup_check: Micros  # SQLite's data_version check (persched._engine.pickup)
    horizon: Micros
    max_args_bytes: int
    namespace: str
    max_clock_skew: Micros | None  # beyond this offset from the database's clock, keep to its time (_engine.skew)
    migration_timeout: float  # seconds start() waits for another process's migration (_store.migrate.upgrade)

    @classmethod
    def checked(
        cls,
        url: str | os.PathLike[str],
        workers: object,
        clock: Clock | SecondsClock | None,
        *,
        instance_id: object,
        lease_seconds: object,
        heartbeat_seconds: object,
        busy_timeout_seconds: object,
        synchronous: object,
        keep_runs: object,
        keep_runs_for_seconds: object,
        allowed_modules: Iterable[str] | None,
        pickup_seconds: object,
        pickup_check_seconds: object,
        horizon_seconds: object,
        max_args_bytes: object,
        namespace: object,
        max_clock_skew_seconds: object = DEFAULT_MAX_CLOCK_SKEW_SECONDS,
        keep_error_runs: object = DEFAULT_KEEP_ERROR_RUNS,
        migration_timeout_seconds: object = DEFAULT_MIGRATION_TIMEOUT_SECONDS,
    ) -> SchedulerConfig:
        """Check `JobScheduler`'s arguments, in the order it always checked them.

        Raises:
            InvalidJobError: An argument is out of range; nothing was opened.
        """
        namespace = validate_namespace(namespace)
        count = int(positive("workers", workers, integer=True, maximum=MAX_WORKERS))  # one thread each
        allowed = normalize_allowed(allowed_modules)
        args_bytes = int(positive("max_args_bytes", max_args_bytes, integer=True, maximum=MAX_ARGS_BYTES_LIMIT))
        keep = None if keep_runs is None else int(positive("keep_runs", keep_runs, integer=True, maximum=MAX_COUNT))
        keep_for = (
            None
            if keep_runs_for_seconds is None
            else Micros(micros(positive("keep_runs_for_seconds", keep_runs_for_seconds, maximum=MAX_DURATION_SECONDS)))
        )
        keep_errors = (
            None
            if keep_error_runs is None
            else int(positive("keep_error_runs", keep_error_runs, integer=True, maximum=MAX_COUNT))
        )
        lease = positive("lease_seconds", lease_seconds, maximum=MAX_DURATION_SECONDS)
        heartbeat = lease / 3 if heartbeat_seconds is None else heartbeat_seconds
        heartbeat = positive("heartbeat_seconds", heartbeat, maximum=MAX_DURATION_SECONDS)
        if heartbeat >= lease:
            raise InvalidJobError(
                "heartbeat_seconds",
                f"must be shorter than lease_seconds ({lease_seconds})",
            )
        busy = busy_timeout(busy_timeout_seconds)
        pickup = positive("pickup_seconds", pickup_seconds, maximum=MAX_DURATION_SECONDS)
        pickup_check = positive("pickup_check_seconds", pickup_check_seconds, maximum=MAX_DURATION_SECONDS)
        horizon = positive("horizon_seconds", horizon_seconds, maximum=MAX_DURATION_SECONDS)
        if horizon < MIN_HORIZON_SECONDS:
            raise InvalidJobError("horizon_seconds", f"must be at least {MIN_HORIZON_SECONDS:g} s")
        # host:pid:random~proof: a restart on this host can tell that it is gone (persched._engine.liveness).
        instance = default_instance_id() if instance_id is None else _instance_id(instance_id)
        try:  # callers may pass anything: refuse it cleanly
            exact = exact_clock(clock if clock is not None else SystemClock())
        except TypeError as exc:
            raise InvalidJobError("clock", str(exc).removeprefix("clock: ")) from None
        skew = (
            None
            if max_clock_skew_seconds is None
            else positive("max_clock_skew_seconds", max_clock_skew_seconds, maximum=MAX_DURATION_SECONDS)
        )
        engine = EngineOptions(busy, synchronous_level(synchronous))  # checked here, not again by open_engine
        migration_timeout = positive(
            "migration_timeout_seconds", migration_timeout_seconds, maximum=MAX_MIGRATION_TIMEOUT_SECONDS
        )
        return cls(
            url=os.fspath(url) if isinstance(url, os.PathLike) else url,  # a plain file path, as a pathlib.Path
            workers=count,
            clock=exact,
            instance_id=instance,
            lease=Micros(micros(lease)),
            heartbeat=Micros(micros(heartbeat)),
            engine=engine,
            keep_runs=keep,
            keep_for=keep_for,
            keep_error_runs=keep_errors,
            allowed_modules=allowed,
            pickup=Micros(micros(pickup)),
            pickup_check=Micros(micros(pickup_check)),
            horizon=Micros(micros(horizon)),
            max_args_bytes=args_bytes,
            namespace=namespace,
            max_clock_skew=None if skew is None else Micros(micros(skew)),
            migration_timeout=migration_timeout,
        )


_CHECKED: Final = tuple(inspect.signature(SchedulerConfig.checked).parameters)


def scheduler_options(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of `SchedulerConfig.checked` among `arguments` (a constructor's ``locals()``), as given."""
    return {name: arguments[name] for name in _CHECKED}
