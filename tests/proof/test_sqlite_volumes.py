"""SQLite on real small volumes: disk full, then space freed; a read-only directory.

`tests.support.volumes` mounts a tmpfs for each test: its size is a real
"disk full" (ENOSPC from the kernel, not ``max_page_count``), and a
read-only remount is a directory that not even root can write.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Final

import pytest

from persched import JobScheduler
from persched.errors import StoreError
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, finished_runs, wait_until
from tests.support.volumes import remount, tmpfs

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]
TARGET: Final = "tests.support.proof_jobs:noop"
PAD: Final = "x" * 900  # arguments that make each job row take real room
MAX_SCHEDULES: Final = 5_000  # bound of the fill loop
FILLER: Final = 256 * 1024  # bytes of another file on the volume, removed to free space
FULL: Final = "database or disk is full"


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _fill(sched: JobScheduler, prefix: str) -> tuple[int, StoreError]:
    """Schedule padded jobs until the volume is full; how many fitted, and the refusal."""
    for i in range(MAX_SCHEDULES):
        try:
            sched.schedule(f"{prefix}{i}", TARGET, 3600.0, args=(PAD,))
        except StoreError as exc:  # noqa: PERF203 - the loop ends here
            return i, exc
    raise AssertionError(f"{MAX_SCHEDULES} schedules fitted in a 1 MiB volume")


def test_disk_full_then_space_freed_gives_the_wal_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Disk full, then space freed: the WAL goes into the database and its space comes back.

    Before: SQLite checkpoints only after a commit that left 1000 pages in
    the WAL, and never shrinks the WAL. On a 1 MiB volume the WAL took the
    whole volume for a database of 4 KB, and space freed later went to the
    WAL as well: the volume was full again after a few more jobs.
    """
    caplog.set_level(logging.WARNING, logger="persched")
    with tmpfs(tmp_path / "vol", "1M") as vol:
        filler = vol / "filler"
        filler.write_bytes(b"\0" * FILLER)
        db, wal = vol / "jobs.db", vol / "jobs.db-wal"
        clock = FakeClock(1_700_000_000.123457)
        sched = JobScheduler(f"sqlite:///{db}", workers=2, clock=clock, keep_runs=None)
        try:
            fitted, refused = _fill(sched, "fill")
            assert FULL in str(refused), refused
            # Space freed: the next write fits, and the WAL is checkpointed and truncated after it.
            filler.unlink()
            sched.schedule("after", TARGET, 1.0, start_in=0)
            assert _size(wal) < FILLER // 4, (_size(db), _size(wal))
            sched.start()
            clock.advance(0.0)
            wait_until(lambda: len(finished_runs(sched, "after")) >= 1, message="a run after space was freed")
            # Full again: now the jobs, not the WAL, fill the volume.
            more, refused = _fill(sched, "more")
            assert FULL in str(refused), refused
            assert _size(db) > _size(wal), (fitted, more, _size(db), _size(wal))
            assert more > 2 * fitted, (fitted, more)  # the freed space and the WAL's went to jobs
        finally:
            sched.shutdown(wait=True, timeout=TIMEOUT)
        with closing(sqlite3.connect(db, timeout=TIMEOUT)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("SELECT count(*) FROM persched_jobs").fetchone()[0] == fitted + more + 1


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PERSCHED_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "persched", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60.0,
        check=False,
    )


@pytest.mark.parametrize("shutdown", ["clean", "crashed"])
def test_read_only_commands_work_in_a_read_only_directory(tmp_path: Path, shutdown: str) -> None:
    """`persched jobs/show/runs` read a database whose directory is read-only, and say so in one line.

    "clean": no -wal/-shm files (SQLite cannot make them: opened immutable);
    "crashed": the process died with -wal/-shm present (read as they are).
    """
    with tmpfs(tmp_path / "vol", "4M") as vol:
        db = vol / "jobs.db"
        code = (
            "import os, sys\n"
            "from persched import JobScheduler\n"
            f"s = JobScheduler({str(db)!r})\n"
            f"s.schedule('a', {TARGET!r}, 60.0)\n" + ("os._exit(0)\n" if shutdown == "crashed" else "s.shutdown()\n")
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60.0)
        assert (vol / "jobs.db-wal").exists() == (shutdown == "crashed")
        remount(vol, "ro")
        try:
            jobs = _cli("--db", str(db), "jobs", "--json")
            show = _cli("--db", str(db), "show", "a")
            runs = _cli("--db", str(db), "runs", "--json")
        finally:
            remount(vol, "rw")
        for proc in (jobs, show, runs):
            assert proc.returncode == 0, (proc.args, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr
            assert len(proc.stderr.splitlines()) <= 1, proc.stderr
            if proc.stderr:
                assert "read-only" in proc.stderr, proc.stderr
        assert [job["job_id"] for job in json.loads(jobs.stdout)] == ["a"]
        assert "target" in show.stdout
        assert json.loads(runs.stdout) == []
        if shutdown == "clean":
            assert "directory is read-only" in jobs.stderr, jobs.stderr
