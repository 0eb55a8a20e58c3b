"""Fixtures shared by the black-box tests of the public API.

`TIMEOUT` bounds every blocking call; `fake_clock` starts at a round epoch so
expected `scheduled_for` values are exact; `make_scheduler` builds schedulers
(FakeClock-driven by default) and shuts every one of them down at teardown;
autouse checks fail a test that leaves a ``persched-*`` thread alive or a
SQLAlchemy connection checked out.

Engines: `make_scheduler` works on `db_url`, the empty database of
``engine_name``. That is SQLite unless the module (or class) is marked
``every_engine``; then each test that uses it runs once per engine of
tests/support/engines.py (``[sqlite]``, ``[postgres]``; the one place to add
an engine). A test there that also asks for `sqlite_url` is about the SQLite
file itself (permissions, WAL, a corrupt file, raw ``sqlite3``) and runs on
SQLite only, as does one marked ``sqlite_only(reason)``. On PostgreSQL `db_url` is one schema per session, migrated once
and brought back to that state before each test (``TRUNCATE ... RESTART
IDENTITY``, then the seeded change counter).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched.errors import SchedulerStateError
from persched.testing import FakeClock
from tests.support import jobs, stop_jobs
from tests.support.engines import (
    ENGINES,
    SQLITE_FILE,
    MigratedDatabases,
    engine_named,
    engine_params,
    required_in_ci,
)
from tests.support.helpers import EPOCH, TIMEOUT, wait_until
from tests.support.mariadb import mariadb_base_url
from tests.support.pools import CheckoutTracker
from tests.support.postgres import pg_base_url
from tests.support.seeds import name_seed_in_failure, seed

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["EPOCH", "TIMEOUT", "SchedulerFactory", "seed", "wait_until"]

pytest_runtest_makereport = name_seed_in_failure  # a randomised test's failure names its seed

THREAD_PREFIX = "persched-"


_NOT_RUN = pytest.StashKey[dict[str, int]]()
SERVER_ENGINES: Final = tuple(engine for engine in ENGINES if engine.url_env is not None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a server engine's URL, leave its tests out and say so once (not 69 SKIPPED lines).

    Where server engines are required (CI), a missing URL stops the run at
    once with one clear error instead of failing each test: they never skip there.
    """
    for engine in SERVER_ENGINES:
        assert engine.url_env is not None
        if os.environ.get(engine.url_env):
            continue
        left_out = [item for item in items if item.get_closest_marker(engine.name) is not None]
        if not left_out:
            continue
        if required_in_ci():
            raise pytest.UsageError(
                f"{len(left_out)} {engine.label} tests need {engine.url_env}, and CI is set, so they may not skip:"
                f" set {engine.url_env} (see README, Development), or unset CI to leave them out"
            )
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker(engine.name) is None]
        config.stash.setdefault(_NOT_RUN, {})[engine.name] = len(left_out)
    _one_worker_for_processes(items)


def _one_worker_for_processes(items: list[pytest.Item]) -> None:
    """Tests of several scheduler processes on the real clock take turns on one pytest-xdist worker, first.

    They count slots run against slots offered, and each keeps about a core busy
    (three schedulers and a database): two at once on a 2-core machine starve
    each other. Those marked ``processes`` form one xdist group (``--dist
    loadgroup``), put at the front so that the longest run of the session starts
    at once while the other workers share the rest. Tests of several processes
    that count nothing against the clock (forks, racing declarations, one
    process driven by hand) are not marked: the group is the session's longest
    run, and they would only lengthen it.
    """
    grouped = [item for item in items if item.get_closest_marker("processes")]
    for item in grouped:
        item.add_marker(pytest.mark.xdist_group("processes"))
    chosen = set(map(id, grouped))
    items[:] = grouped + [item for item in items if id(item) not in chosen]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its count of left-out tests to the controller, which prints the line."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["persched_not_run"] = session.config.stash.get(_NOT_RUN, {})


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown without it
def pytest_testnodedown(node: object, error: object) -> None:
    """The controller's side of `pytest_sessionfinish`: every worker collects (and leaves out) the same tests."""
    config: pytest.Config = node.config  # type: ignore[attr-defined]  # an xdist WorkerController
    counts: dict[str, int] = getattr(node, "workeroutput", {}).get("persched_not_run", {})
    not_run = config.stash.setdefault(_NOT_RUN, {})
    for name, left_out in counts.items():
        not_run[name] = max(not_run.get(name, 0), left_out)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """One line per server engine whose tests were left out."""
    for name, left_out in config.stash.get(_NOT_RUN, {}).items():
        engine = engine_named(name)
        terminalreporter.write_line(
            f"{left_out} {engine.label} tests not run (deselected): {engine.url_env} is not set; CI runs them"
        )


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers these tests use (also declared in pyproject.toml)."""
    config.addinivalue_line("markers", "slow: subprocess/wheel")
    config.addinivalue_line("markers", "stress: many threads, bounded budget")
    config.addinivalue_line("markers", "every_engine: run the tests that use engine_name on every engine")
    config.addinivalue_line("markers", "sqlite_only(reason): in an every_engine module, stay on SQLite (say why)")
    config.addinivalue_line("markers", "processes: several scheduler processes on the real clock (one xdist worker)")
    for engine in SERVER_ENGINES:
        config.addinivalue_line("markers", f"{engine.name}: needs {engine.url_env}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """In a module or class marked ``every_engine``, run each test that uses `engine_name` on every engine.

    Not a test that asks for `sqlite_url` (it is about the SQLite file) or is
    marked ``sqlite_only(reason)``: those stay on SQLite, the default of
    `engine_name`.
    """
    if (
        "engine_name" in metafunc.fixturenames
        and "sqlite_url" not in metafunc.fixturenames
        and metafunc.definition.get_closest_marker("every_engine") is not None
        and metafunc.definition.get_closest_marker("sqlite_only") is None
    ):
        metafunc.parametrize("engine_name", engine_params(), indirect=True)


@pytest.fixture
def engine_name(request: pytest.FixtureRequest) -> str:
    """The engine of `db_url`: "sqlite", or each engine in turn where ``every_engine`` applies."""
    name: str = getattr(request, "param", "sqlite")
    return name


@pytest.fixture(scope="session")
def migrated_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedDatabases]:
    """The session's server databases (migrated once, on first use); removed at the end."""
    databases = MigratedDatabases(tmp_path_factory.mktemp("engines"))
    yield databases
    databases.close()


@pytest.fixture
def db_url(engine_name: str, tmp_path: Path, migrated_databases: MigratedDatabases) -> str:
    """An empty, migrated database of `engine_name`: a new SQLite file, or the emptied session database of a server.

    Tests that need a database nobody has migrated ask for `empty_db_url`.
    """
    return migrated_databases.empty(engine_named(engine_name), tmp_path)


@pytest.fixture
def empty_db_url(engine_name: str, tmp_path: Path) -> Iterator[str]:
    """A brand-new database of `engine_name` that nobody has migrated (a fresh PostgreSQL schema)."""
    with engine_named(engine_name).fresh(tmp_path, "t") as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLAlchemy URL of a fresh SQLite file in the test's temp dir."""
    return f"sqlite:///{tmp_path / SQLITE_FILE}"


@pytest.fixture
def fake_clock() -> FakeClock:
    """A FakeClock at `EPOCH`."""
    return FakeClock(start=EPOCH)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A local server socket that a process job connects to once it runs (tests/support/stop_jobs.py)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(TIMEOUT)
        yield server


@pytest.fixture
def mariadb_url() -> str:
    """PERSCHED_TEST_MARIADB_URL; left out locally without it, a failure in CI."""
    return mariadb_base_url()


@pytest.fixture
def pg_url() -> str:
    """PERSCHED_TEST_PG_URL; skipped locally without it, a failure in CI."""
    return pg_base_url()


class SchedulerFactory:
    """Builds schedulers on the test's database and shuts them all down at teardown."""

    def __init__(self, url: str, clock: FakeClock) -> None:
        self.url = url
        self.clock = clock
        self.created: list[JobScheduler] = []

    def __call__(
        self,
        url: str | None = None,
        *,
        clock: FakeClock | None = None,
        real_clock: bool = False,
        workers: int = 8,
        start: bool = False,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        busy_timeout_seconds: float = 5.0,
        instance_id: str | None = None,
        pickup_seconds: float = 1.0,
        pickup_check_seconds: float = 0.1,
    ) -> JobScheduler:
        """Return a new scheduler (FakeClock-driven unless `real_clock`), started if asked."""
        sched = JobScheduler(
            self.url if url is None else url,
            workers=workers,
            clock=None if real_clock else (self.clock if clock is None else clock),
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds,
            busy_timeout_seconds=busy_timeout_seconds,
            instance_id=instance_id,
            pickup_seconds=pickup_seconds,
            pickup_check_seconds=pickup_check_seconds,
        )
        self.created.append(sched)
        if start:
            sched.start()
        return sched

    def close(self) -> None:
        """Release blocked targets, then shut every scheduler down (bounded)."""
        jobs.release_all()
        for sched in reversed(self.created):
            # Never started, or the test already shut it down.
            with contextlib.suppress(SchedulerStateError):
                sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def make_scheduler(db_url: str, fake_clock: FakeClock) -> Iterator[SchedulerFactory]:
    """A factory of schedulers on `db_url` that are all shut down at teardown."""
    factory = SchedulerFactory(db_url, fake_clock)
    yield factory
    factory.close()


@pytest.fixture(autouse=True)
def _reset_jobs() -> Iterator[None]:
    """Start every test with an empty call registry; release gates afterwards."""
    jobs.reset()
    yield
    jobs.release_all()


@pytest.fixture(autouse=True)
def _root_logging_kept() -> Iterator[None]:
    """Give the root logger back its handlers and level: the command line run in-process adds a
    handler on the test's captured stderr, which is closed once the test ends, and every later
    WARNING in the same worker would fail to write there."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _no_checked_out_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a SQLAlchemy connection checked out of any pool.

    Checked after the test's own fixtures are torn down (they were set up after
    this one) and after `_no_leaked_threads`, which sorts after it and so is
    torn down before it: a thread that ends during its bounded join returns
    its connection first.
    """
    tracker = CheckoutTracker()
    tracker.start()
    try:
        yield
    finally:
        tracker.stop()
    tracker.check(request.node.nodeid)


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a ``persched-*`` thread alive (after a bounded join)."""
    before = {t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)}
    yield
    jobs.release_all()
    deadline = time.monotonic() + TIMEOUT
    leaked: list[threading.Thread] = []
    for t in threading.enumerate():
        if t.name.startswith(THREAD_PREFIX) and t not in before:
            t.join(max(deadline - time.monotonic(), 0.0))
            if t.is_alive():
                leaked.append(t)
    stop_jobs.forget()  # once its jobs' threads ended: a later test that reuses a key starts unseen
    assert not leaked, f"threads left alive: {[t.name for t in leaked]}"
