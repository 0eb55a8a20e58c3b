"""The dashboard says what `persched check` says: a banner when no scheduler is alive for the namespace,
and marks on the overdue and failing jobs (docs/operations.md, "Health checks").

The dashboard is given the scheduler's FakeClock as its clock, so "overdue" is judged at a known instant.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from persched import JobScheduler
from persched._model.instant import micros
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT
from tests.web.conftest import START, fill, serve_app
from tests.web.test_app import request

if TYPE_CHECKING:
    from pathlib import Path


def marks(page: str) -> dict[str, list[str]]:
    """The marks of each job row of the jobs page: job id -> kinds."""
    found: dict[str, list[str]] = {}
    for job_id, cell in re.findall(r"<tr><td><a href=\"[^\"]*\">([^<]+)</a>(.*?)</td>", page):
        found[job_id] = re.findall(r'<span class="mark (\w+)"', cell)
    return found


def test_a_live_scheduler_has_no_banner_and_only_the_failing_job_is_marked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    clock = FakeClock(START)
    sched = fill(url, clock)  # "bad" failed at each of its slots
    try:
        for dashboard in serve_app(url, None, lambda: micros(clock.now())):
            page = request(dashboard.url, "GET", "/").body
            assert 'class="alarm"' not in page
            assert marks(page) == {"bad": ["failing"], "good": [], "skipper": []}
            bad = request(dashboard.url, "GET", "/job?id=bad").body
            assert re.search(r'<h1>Job bad <span class="mark failing" title="[^"]*is failing: its last 3 runs', bad)
            assert 'class="mark' not in request(dashboard.url, "GET", "/job?id=good").body
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_with_no_scheduler_alive_a_banner_says_so_and_late_jobs_are_marked_overdue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dead.db'}"
    clock = FakeClock(START)
    fill(url, clock).shutdown(wait=True, timeout=TIMEOUT)
    clock.advance(3600.0)  # an hour later, nothing has run
    for dashboard in serve_app(url, None, lambda: micros(clock.now())):
        page = request(dashboard.url, "GET", "/").body
        (banner,) = re.findall(r'<p class="alarm" id="no-scheduler-default">([^<]*)</p>', page)
        assert banner.startswith("namespace &#x27;default&#x27;: no live scheduler, and 3 jobs wait to run")
        assert marks(page) == {"bad": ["overdue", "failing"], "good": ["overdue"], "skipper": ["overdue"]}
        job = request(dashboard.url, "GET", "/job?id=good").body
        assert 'id="no-scheduler-default"' in job
        assert '<span class="mark overdue" title="namespace &#x27;default&#x27;: job &#x27;good&#x27; is overdue' in job
        # Every namespace at once: the same judgements.
        everything = request(dashboard.url, "GET", "/?all=1").body
        assert 'id="no-scheduler-default"' in everything


def test_a_paused_namespace_has_no_banner_and_its_jobs_no_overdue_mark(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'paused.db'}"
    clock = FakeClock(START)
    sched = fill(url, clock)
    assert sched.pause_all() == 3
    sched.shutdown(wait=True, timeout=TIMEOUT)
    clock.advance(3600.0)
    for dashboard in serve_app(url, None, lambda: micros(clock.now())):
        page = request(dashboard.url, "GET", "/").body
        assert 'class="alarm"' not in page  # nothing waits to run: nothing is wrong with no scheduler
        assert marks(page) == {"bad": ["failing"], "good": [], "skipper": []}


def test_a_job_page_lists_the_excluded_dates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dates.db'}"
    clock = FakeClock(START)
    sched = JobScheduler(url, clock=clock)
    sched.schedule("holidays", "tests.support.jobs:record", 60.0, exclude=["2023-12-24/2023-12-26", "2024-01-01"])
    sched.shutdown(wait=True, timeout=TIMEOUT)
    for dashboard in serve_app(url, None, lambda: micros(clock.now())):
        page = request(dashboard.url, "GET", "/job?id=holidays").body
        assert '<dt>excluded dates</dt><dd id="job-excluded-dates">2023-12-24/2023-12-26, 2024-01-01</dd>' in page
        assert "every 1 min, with excluded dates" in page
        assert "excluded dates" not in request(dashboard.url, "GET", "/job?id=nope").body
