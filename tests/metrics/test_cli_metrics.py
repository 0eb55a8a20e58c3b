"""`persched run --metrics-port`: a real process scraped over HTTP, then stopped by SIGTERM."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("prometheus_client")

from tests.metrics.test_metrics import scrape, value
from tests.support.helpers import wait_until
from tests.support.served import Served

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_run_serves_metrics_until_sigterm(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'served.db'}"
    served = Served("--db", db, "run", "--import", "tests.support.metrics_app", "--metrics-port", "0", cwd=tmp_path)
    try:
        url = served.wait_for(r"metrics at (http://127\.0\.0\.1:\d+/metrics)").group(1)
        wait_until(lambda: value(scrape(url), "persched_runs_total", outcome="ok") == 1, message="the tick ran")
        samples = scrape(url)
        assert value(samples, "persched_runs_started_total") == 1
        assert value(samples, "persched_run_lateness_seconds_count") == 1
        # Jobs by state is read from the database at most every 5 s: a scrape before the
        # setup hook scheduled "tick" may still be the cached answer for a while.
        wait_until(
            lambda: value(scrape(url), "persched_jobs", state="scheduled") == 1, message="the job count caught up"
        )
    finally:
        code = served.stop()
    assert code == 0, served.lines
