"""The wall clock stepped under a running scheduler, and a restart after a correction.

A scheduler process (tests/support/wallclock_child.py) runs while the test steps its
wall clock: +1 h, then -2 h, then +1 h; then a process started while the clock is an
hour ahead writes its rows, and one started after the correction must take the job
up within one interval (docs/reference/behaviour.md, "Time" and "Clock corrections across a restart"). Run
times are taken on CLOCK_MONOTONIC, which is never stepped. Asserted: no burst, no
stall longer than one interval (plus a margin for a loaded machine), no
(generation, scheduled_for) twice.

The clock is stepped two ways. ``injected``: the child's scheduler gets a clock that
adds the seconds of an offset file to the system's wall clock. ``libfaketime``:
Debian's libfaketime (`.ci/run` installs it) steps the system clock itself under the
child, so that any reading of the real wall clock, by persched or a library, is
stepped too. libfaketime slows the child down: it interposes
``pthread_cond_timedwait``, which CPython's GIL waits with, and its wrapper masks
signals and (with ``FAKETIME_NO_CACHE``) re-reads the offset file at every wait —
``strace -c`` of two threads, one spinning, counts ~2,300 reads of the file and
~4,600 ``rt_sigprocmask`` in 2 s, and a timed 10 ms wait took 44-130 ms on average
against 19 ms without it. With many threads on a busy machine that made stalls of
2-4 s, which were libfaketime's; so the child keeps few threads.
"""

from __future__ import annotations

import glob
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.helpers import TIMEOUT, wait_until
from tests.support.wallclock_child import INTERVAL

if TYPE_CHECKING:
    from collections.abc import Callable

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

    def __init__(self, tmp: Path, name: str, env: dict[str, str], extra: list[str]) -> None:
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
                *extra,
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


def _write_offset(path: Path, value: str) -> None:
    """Replace the offset file at once: a reader never sees it empty or half written."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as tmp:
        tmp.write(f"{value}\n")
    os.replace(tmp.name, path)


@pytest.fixture(params=["injected", "libfaketime"])
def stepped_clock(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[dict[str, str], list[str], Callable[[str], None]]:
    """(the child's environment, its extra arguments, a function that sets the wall clock's offset: "+3600")."""
    offset = tmp_path / "offset"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    if request.param == "injected":
        _write_offset(offset, "0")
        return env, [str(offset)], lambda value: _write_offset(offset, value)
    _write_offset(offset, "+0")
    env.update(
        LD_PRELOAD=_libfaketime(),
        FAKETIME_TIMESTAMP_FILE=str(offset),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    return env, [], lambda value: _write_offset(offset, value)


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
@pytest.mark.processes
def test_wall_clock_jumps_and_a_restart_after_a_correction(
    tmp_path: Path, stepped_clock: tuple[dict[str, str], list[str], Callable[[str], None]]
) -> None:
    env, extra, set_offset = stepped_clock
    children: list[Child] = []

    def child(name: str) -> Child:
        children.append(Child(tmp_path, name, env, extra))
        return children[-1]

    try:
        a = child("a")
        phases = [("+3600", "+1 h"), ("-3600", "-2 h"), ("+0", "+1 h")]
        time.sleep(1.0)  # real time passing: the scheduler runs meanwhile (no interleaving is hoped for)
        for value, _ in phases:
            set_offset(value)
            time.sleep(1.0)
        a.stop()
        _check_steady(_ticks(tmp_path, a.started), "across jumps of +1 h, -2 h, +1 h")

        set_offset("+3600")  # a process started while the clock is an hour ahead writes its rows
        b = child("b")
        wait_until(lambda: len(_ticks(tmp_path, b.started)) >= 3, timeout=3 * TIMEOUT, message="b ran")
        b.stop()

        set_offset("+0")  # the clock is corrected and the service restarted
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
