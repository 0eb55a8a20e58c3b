"""The README's web-app case: `examples/wsgi_app.py` served by four pre-forked worker
processes (`examples/serve_prefork.py`, gunicorn's model), each starting its own
scheduler on one SQLite file at import. Every slot of the job runs exactly once
across the workers (they share the work: one of them owns the job), and SIGTERM stops
them all gracefully."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import pytest

from tests.multi._cluster import REPO, check_once, child_env, fetch_runs, throttled
from tests.support.helpers import TIMEOUT, sql, wait_until
from tests.support.pressure import CpuPressure

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.slow, pytest.mark.processes]

WORKERS: Final = 4
INTERVAL: Final = 0.2
SERVER: Final = (sys.executable, "-m", "examples.serve_prefork")
SLOTS: Final = 15  # about three seconds of slots


def _lines(log: Path) -> list[tuple[str, str, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        job_id, slot, pid = line.split("\t")
        out.append((job_id, slot, int(pid)))
    return out


def test_every_slot_runs_once_across_web_workers(tmp_path: Path) -> None:
    pressure = CpuPressure()
    db = f"sqlite:///{tmp_path / 'app.db'}"
    log = tmp_path / "runs.tsv"
    port_file = tmp_path / "port"
    env = child_env()
    env.update(PERSCHED_DB=db, EXAMPLE_INTERVAL=str(INTERVAL), EXAMPLE_LOG=str(log))
    with (tmp_path / "server.log").open("wb") as out:
        server = subprocess.Popen(
            [*SERVER, "--workers", str(WORKERS), "--port", "0", "--port-file", str(port_file)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: port_file.exists() or server.poll() is not None, timeout=3 * TIMEOUT, message="port")
        assert server.poll() is None, (tmp_path / "server.log").read_text()
        port = int(port_file.read_text())
        served_by: set[int] = set()

        def ask() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=TIMEOUT) as response:
                    body = json.loads(response.read())
            except TimeoutError:
                return False  # a worker still starting on a starved machine: ask again, until the deadline

            assert [j["job_id"] for j in body["jobs"]] == ["refresh-cache"]
            served_by.add(body["pid"])
            return True

        wait_until(throttled(ask), timeout=3 * TIMEOUT, message="the app answers")

        # Enough slots, with more than one worker's scheduler sharing the work (else the test
        # proves little).
        def members() -> int:
            return int(sql(db, "SELECT count(*) FROM persched_instances")[0][0])

        wait_until(
            throttled(lambda: len(_lines(log)) >= SLOTS and members() >= 2),
            timeout=6 * TIMEOUT,
            message=f"{SLOTS} runs, with at least two workers sharing the work",
        )
    finally:
        pressure.stop()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(3 * TIMEOUT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(TIMEOUT)
            raise
    assert code == 0, (tmp_path / "server.log").read_text()
    lines = _lines(log)
    slots = [slot for _, slot, _ in lines]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(slots)}"
    runs = fetch_runs(db)
    assert {r.instance_id.split(":")[1] for r in runs} >= {str(pid) for _, _, pid in lines}
    first = {"refresh-cache": min(r.scheduled_for for r in runs)}
    # The side-effect check of check_once is by (job, generation, slot); the example logs (job, slot).
    assert {(r.job_id, r.scheduled_for.isoformat()) for r in runs if r.outcome == "ok"} == {
        (job_id, slot) for job_id, slot, _ in lines
    }
    check_once(runs, None, {"refresh-cache": INTERVAL}, first, starved=pressure.share())
    assert (
        datetime.fromisoformat(max(slots)) - datetime.fromisoformat(min(slots))
        >= (SLOTS - 1) * timedelta(seconds=INTERVAL) * 0.9
    )
