"""`persched run` tells its operator what happens, through the real console script.

The service logs, at INFO, each change another process made (here: the
command line), names the runs it waits for at shutdown, logs a line per run
at DEBUG, and shows Alembic's lines only when something is migrated.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from tests.support import cli_jobs
from tests.support.cli_run import REPO, RUN_TIMEOUT, cli_env, persched
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

MODULE = "tests.support.cli_jobs"  # its persched_setup schedules "slow"


class Service:
    """A `persched run --import tests.support.cli_jobs` process and its log file."""

    def __init__(self, tmp_path: Path, *options: str, sleep_seconds: float = 1.0) -> None:
        self.markers = tmp_path / "markers"
        self.markers.mkdir()
        self.db = f"sqlite:///{tmp_path / 'service.db'}"
        self.log = self.markers / "stderr.log"
        with self.log.open("w") as stderr:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "persched",
                    "--db",
                    self.db,
                    *options,
                    "run",
                    "--import",
                    "tests.support.cli_jobs",
                ],
                cwd=REPO,
                env=cli_env({cli_jobs.MARKERS_ENV: str(self.markers), cli_jobs.SLEEP_ENV: str(sleep_seconds)}),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def text(self) -> str:
        return self.log.read_text()

    def wait_for_log(self, needle: str) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"persched run exited early with {self.proc.returncode}:\n{self.text()}")
            return needle in self.text()

        wait_until(seen, timeout=RUN_TIMEOUT, message=f"log line {needle!r}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(RUN_TIMEOUT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in started:
        service.kill()


def test_the_service_logs_changes_made_elsewhere(tmp_path: Path, service_factory: list[Service]) -> None:
    # A job declared by another process before the service starts.
    url = f"sqlite:///{tmp_path / 'service.db'}"
    other = JobScheduler(url)
    other.schedule("report", cli_jobs.noop, 3600.0)
    other.shutdown()
    service = Service(tmp_path, sleep_seconds=0.0)
    service_factory.append(service)
    service.wait_for_log("SIGINT or SIGTERM stops it")
    for argv, line in [
        (["pause", "report"], "picked up a change made elsewhere: report generation 1 paused"),
        (["resume", "report"], "picked up a change made elsewhere: report generation 1 scheduled"),
        (["run-now", "report"], "picked up a change made elsewhere: report generation 1 run-now requested"),
        (["deschedule", "report"], "picked up a change made elsewhere: report generation 1 descheduled"),
    ]:
        assert persched("--db", url, *argv).returncode == 0
        service.wait_for_log(line)
    assert service.stop() == 0
    # Its own declaration (persched_setup's "slow") is not reported as made elsewhere.
    picked = [line for line in service.text().splitlines() if "picked up a change" in line]
    assert not [line for line in picked if " slow " in line], picked


def test_the_service_names_the_runs_it_waits_for_and_logs_each_run_at_debug(
    tmp_path: Path, service_factory: list[Service]
) -> None:
    service = Service(tmp_path, "--debug", sleep_seconds=1.0)
    service_factory.append(service)
    wait_until(lambda: (service.markers / "started").exists(), timeout=RUN_TIMEOUT, message="slow started")
    assert service.stop() == 0
    log = service.text()
    assert "waits for 1 run in flight to finish: slow" in log
    assert "run 1 of slow generation 1 started" in log
    assert "run 1 of slow generation 1 ended: ok" in log


def test_alembic_logs_only_when_something_is_migrated(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = persched("-v", "--db", db, "migrate")
    assert first.returncode == 0, first.stderr
    alembic = [line for line in first.stderr.splitlines() if " alembic." in line]
    assert alembic, first.stderr
    assert all("Running upgrade" in line for line in alembic), alembic
    again = persched("-v", "--db", db, "migrate")
    assert again.returncode == 0, again.stderr
    assert " alembic." not in again.stderr, again.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_restart_after_a_crash_on_this_host_recovers_at_once(tmp_path: Path, service_factory: list[Service]) -> None:
    crashed = Service(tmp_path, sleep_seconds=600.0)
    service_factory.append(crashed)
    wait_until(lambda: (crashed.markers / "started").exists(), timeout=RUN_TIMEOUT, message="slow started")
    crashed.proc.send_signal(signal.SIGKILL)
    crashed.proc.wait(TIMEOUT)
    (tmp_path / "markers").rename(tmp_path / "markers-crashed")
    ((lease_until,),) = sql(crashed.db, "SELECT lease_until FROM persched_runs WHERE run_id = 1 AND outcome IS NULL")
    restarted = Service(tmp_path, sleep_seconds=0.0)
    service_factory.append(restarted)
    restarted.wait_for_log("whose process is gone (same host and boot); recorded as lost")
    assert restarted.stop() == 0
    # Recovered before its 30 s lease could have lapsed: the "lost" record ends before the lease it had.
    ((outcome, finished_at),) = sql(crashed.db, "SELECT outcome, finished_at FROM persched_runs WHERE run_id = 1")
    assert outcome == "lost"
    assert finished_at < lease_until  # both UTC text of one format in SQLite: ordered as instants
