"""Fixtures shared by the tests of this folder: the race tests' seams, the declaration tests' scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from tests.support import jobs
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched.testing import FakeClock
    from tests.support.race_jobs import Seam


@pytest.fixture
def seams() -> Iterator[list[Seam]]:
    """Seams to release at teardown (before the schedulers are shut down)."""
    made: list[Seam] = []
    yield made
    for seam in made:
        seam.release()


@pytest.fixture
def app(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """A started scheduler of namespace "app" on `db_url`, on the module's `clock`."""
    sched = JobScheduler(db_url, clock=clock, namespace="app")
    sched.start()
    yield sched
    jobs.release_all()
    sched.shutdown(wait=True, timeout=TIMEOUT)
