"""`persched run --metrics-port`: a real process scraped over HTTP, then stopped by SIGTERM."""

from __future__ import annotations

import http.client
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("prometheus_client")

from persched.metrics import JOBS_CACHE_SECONDS, METRICS_LIMITS
from tests.metrics.test_metrics import scrape, value
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.raw_http import connect, get
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
            lambda: value(scrape(url), "persched_jobs", state="scheduled") == 1,
            timeout=JOBS_CACHE_SECONDS + TIMEOUT,
            message="the job count caught up",
        )
    finally:
        code = served.stop()
    assert code == 0, served.lines


def test_the_endpoint_answers_only_its_own_names_and_outlasts_slow_clients(tmp_path: Path) -> None:
    """DNS rebinding and slowloris on ``--metrics-port``, with raw sockets against a real process."""
    db = f"sqlite:///{tmp_path / 'hosts.db'}"
    served = Served(
        "--db", db, "run", "--import", "tests.support.metrics_app", "--metrics-port", "0",
        "--metrics-allowed-host", "prom.example", cwd=tmp_path,
    )  # fmt: skip
    try:
        port = int(served.wait_for(r"metrics at http://127\.0\.0\.1:(\d+)/metrics").group(1))
        assert get(port, "/metrics").status == 200
        assert get(port, "/metrics", f"localhost:{port}").status == 200
        assert "persched_runs_in_flight" in get(port, "/metrics", "prom.example:9464").body
        refused = get(port, "/metrics", f"evil.example:{port}")
        assert refused.status == 400
        assert "persched_" not in refused.body
        served.wait_for(r"metrics: refused GET /metrics from 127\.0\.0\.1: Host 'evil\.example")
        slow = []
        try:
            for _ in range(100):  # more than the endpoint reads at once (64)
                sock = connect(port)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                slow.append(sock)
            # Served before the slow clients' read timeout: an endpoint that waited for them answers only after it.
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=METRICS_LIMITS.read_timeout / 2)
            conn.request("GET", "/metrics")
            assert conn.getresponse().status == 200
            conn.close()
        finally:
            for sock in slow:
                sock.close()
    finally:
        code = served.stop()
    assert code == 0, served.lines
