"""The dashboard shows retries: each run's attempt, a job's retry policy and its pending attempt.

A real scheduler on a `FakeClock` makes the history (each advance waited for
with `wait_idle`): "flaky" fails its first two attempts of one slot and waits
for its third; "good" has no retries. The dashboard is given the same clock.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from persched import JobScheduler
from persched._model.instant import micros
from persched.testing import FakeClock
from tests.support.attempts import retried_slot
from tests.support.helpers import TIMEOUT
from tests.web.conftest import START, serve_app
from tests.web.test_app import request

if TYPE_CHECKING:
    from pathlib import Path

    from persched import Run

ISO: Final = "%Y-%m-%dT%H:%M:%SZ"


def _history(url: str, clock: FakeClock) -> list[Run]:
    """Make the history; return flaky's runs, oldest first."""
    sched = JobScheduler(url, clock=clock)
    try:
        retried_slot(sched, clock, "good", (10.0,), retry_max_delay_seconds=600)  # attempt 3: 20 s after attempt 2
        runs = sorted(sched.runs("flaky", limit=10), key=lambda run: run.run_id or 0)
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    assert [(run.attempt, run.outcome) for run in runs] == [(1, "error"), (2, "error")]
    return runs


def _rows(page: str) -> list[dict[str, str]]:
    """The runs table of a page: one dict (header -> cell text) per row."""
    table = re.search(r"<table id=runs>(.*?)</table>", page, re.S)
    assert table is not None, page
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", table.group(1))
    rows = re.findall(r"<tr><td.*?</tr>", table.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    strip = re.compile(r"<[^>]+>")
    return [dict(zip(headers, (html.unescape(strip.sub("", c)) for c in row), strict=True)) for row in cells]


def test_the_runs_and_the_job_page_show_each_runs_attempt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'retries.db'}"
    clock = FakeClock(START)
    first, _ = _history(url, clock)
    for dashboard in serve_app(url, None, lambda: micros(clock.now())):
        runs = _rows(request(dashboard.url, "GET", "/runs").body)
        flaky = [row for row in runs if row["Job"] == "flaky"]
        assert [(row["Try"], row["Outcome"]) for row in flaky] == [("2", "error"), ("1", "error")]  # newest first
        assert {row["Scheduled for (UTC)"] for row in flaky} == {first.scheduled_for.strftime(ISO)}
        # A retry is not late: it starts after its slot on purpose.
        assert [row["Lateness"] for row in flaky] == ["-", "0ms"]
        assert next(row for row in runs if row["Job"] == "good")["Try"] == "1"

        page = request(dashboard.url, "GET", "/job?id=flaky").body
        assert [row["Try"] for row in _rows(page)] == ["2", "1"]
        # The chart draws the retry's duration but no lateness for it.
        lateness, duration = (
            re.search(rf'<svg id="chart-{name}".*?</svg>', page, re.S) for name in ("lateness", "duration")
        )
        assert lateness is not None
        assert duration is not None
        assert lateness.group().count("<circle") == 1
        assert duration.group().count("<circle") == 2
        assert "(error, attempt 2)" in duration.group()


def test_the_job_page_shows_the_retry_policy_and_the_pending_attempt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pending.db'}"
    clock = FakeClock(START)
    first, second = _history(url, clock)
    assert second.finished_at is not None
    due = (second.finished_at + timedelta(seconds=20)).strftime(ISO)  # 20 s after attempt 2 ended (backoff 2)
    for dashboard in serve_app(url, None, lambda: micros(clock.now())):
        page = request(dashboard.url, "GET", "/job?id=flaky").body
        retries = re.search(r'<dd id="job-retries">([^<]*)</dd>', page)
        assert retries is not None
        assert retries.group(1) == "3 (first after 10 s, each delay x2, at most 10 min)"
        next_run = re.search(r'<dd id="job-next-run">([^<]*)</dd>', page)
        assert next_run is not None
        slot = first.scheduled_for.strftime(ISO)
        assert next_run.group(1).endswith(f", attempt 3 of 4 for the slot {slot}"), next_run.group(1)
        assert next_run.group(1).startswith(f"{due} (in 20s)"), next_run.group(1)

        good = request(dashboard.url, "GET", "/job?id=good").body
        assert 'id="job-retries"' not in good
        assert "attempt" not in good
        # Without a retry on the page, the runs table keeps its columns.
        assert "<th" in good
        assert "Try</th>" not in good
