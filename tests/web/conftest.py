"""A database with history, and the dashboard served on it on a free local port.

The history is made by a real scheduler on a FakeClock at an odd instant:
"good" runs ok, "bad" fails, "skipper" (misfire "skip") has a missed range.
The scheduler is shut down before the dashboard opens the file, unless a
test asks for `running` (then it keeps running: the dashboard must not care).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from persched._interfaces.dashboard.app import WebApp
from persched._interfaces.dashboard.serve import make_web_server
from persched._interfaces.existing import open_existing
from persched._model.models import DEFAULT_NAMESPACE
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from persched._interfaces.http.server import Limits, Server

START = 1_700_000_000.123457
TOKEN = "s3cret-token-for-tests"


def fill(url: str, clock: FakeClock) -> JobScheduler:
    """Schedule the three jobs and run a few slots; return the (started) scheduler."""
    sched = JobScheduler(url, clock=clock)
    sched.schedule("good", "tests.support.jobs:record", 10.0, args=("good",))
    sched.schedule("bad", "tests.support.jobs:fail", 10.0, args=("bad", "boom <b>&"))
    sched.schedule("skipper", "tests.support.jobs:record", 10.0, args=("s",), misfire="skip")
    sched.start()
    for _ in range(3):
        clock.advance(10)
        assert sched.wait_idle(TIMEOUT)
    clock.advance(45)  # "skipper" drops the late slots: a missed range
    assert sched.wait_idle(TIMEOUT)
    return sched


@dataclass
class Dashboard:
    """A served dashboard: its base URL (127.0.0.1), app, database URL and server."""

    url: str
    app: WebApp
    db: str
    server: Server

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self.server.server_port

    @property
    def own_url(self) -> str:
        """Its URL under its own name, as `persched web` prints it (browsers resolve persched.localhost)."""
        return f"http://persched.localhost:{self.port}"


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database with history; no scheduler running on it."""
    url = f"sqlite:///{tmp_path / 'web.db'}"
    sched = fill(url, FakeClock(START))
    sched.shutdown(wait=True, timeout=TIMEOUT)
    return url


def serve_app(
    db: str,
    token: str | None,
    now: Callable[[], int] | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    limits: Limits | None = None,
    allowed_hosts: Sequence[str] = (),
    monotonic: Callable[[], float] | None = None,
) -> Iterator[Dashboard]:
    """Serve the dashboard of `db` (actions stamped by `now`, default the real clock) while iterated."""
    store = open_existing(db, namespace)
    app = WebApp(store, token, now, monotonic=monotonic)
    server = make_web_server(app, "127.0.0.1", 0, allowed_hosts=allowed_hosts, limits=limits)
    thread = threading.Thread(target=server.serve_forever, name="web-test-server", daemon=True)
    thread.start()
    try:
        yield Dashboard(f"http://127.0.0.1:{server.server_port}", app, db, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)
        store.engine.dispose()


@pytest.fixture
def dashboard(db: str) -> Iterator[Dashboard]:
    """The dashboard with actions (started with TOKEN)."""
    yield from serve_app(db, TOKEN)


@pytest.fixture
def readonly(db: str) -> Iterator[Dashboard]:
    """The dashboard started without a token."""
    yield from serve_app(db, None)
