"""WAL headroom: how much free space beside a SQLite database persched needs.

Three measurements on one scheduler running `--jobs` jobs every `--interval`
seconds (a real scheduler, real clock, default options):

- ``steady``: for `--seconds`, the largest size of the ``-wal`` and ``-shm``
  files (sampled every millisecond), and the WAL bytes written per run;
- ``reader``: the same while another connection holds one read transaction
  open for the whole window (a backup, a long report): no checkpoint can
  reset the WAL past the reader's snapshot, so it only grows;
- ``full`` (needs root: a tmpfs of `--volume-mb`): the reader again, until
  the WAL fills the volume and the writes fail; then the reader ends, the
  scheduler stops, and the database is checkpointed
  (``wal_checkpoint(TRUNCATE)``) after freeing 64 KiB of the volume at a
  time: how much had to be freed before the checkpoint went through.

Prints one JSON line per measurement (sizes in bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

TARGET = "benchmarks.targets:noop"
CHUNK = 64 * 1024  # bytes freed at a time in `full`


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class _Peaks:
    """Samples the -wal and -shm sizes every millisecond on a thread of its own."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.wal = self.shm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            self.wal = max(self.wal, _size(self.db + "-wal"))
            self.shm = max(self.shm, _size(self.db + "-shm"))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def _reader(db: str) -> Iterator[None]:
    """One read transaction held open: the WAL cannot be reset past its snapshot."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM persched_jobs").fetchone()
    try:
        yield
    finally:
        conn.execute("COMMIT")
        conn.close()


def _runs(db: str) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("SELECT count(*) FROM persched_runs").fetchone()[0])


def _workload(db: str, args: argparse.Namespace, name: str, read: bool) -> dict[str, Any]:
    from persched import JobScheduler

    sched = JobScheduler(db, workers=4, keep_runs=None)
    for i in range(args.jobs):
        sched.schedule(f"j{i}", TARGET, args.interval, start_in=0)
    sched.start()
    time.sleep(1.0)  # warm up: the WAL reaches its usual size
    peaks = _Peaks(db)
    before, wal_before = _runs(db), _size(db + "-wal")
    with _reader(db) if read else contextlib.nullcontext():
        time.sleep(args.seconds)
        wal_after = _size(db + "-wal")
    peaks.stop()
    sched.shutdown(wait=True, timeout=10)
    runs = _runs(db) - before
    record = {"measurement": name, "jobs": args.jobs, "interval": args.interval, "seconds": args.seconds}
    record.update(runs=runs, wal_peak=peaks.wal, shm_peak=peaks.shm, db=_size(db))
    if read:
        record["wal_growth_per_second"] = round((wal_after - wal_before) / args.seconds)
        record["wal_bytes_per_run"] = round((wal_after - wal_before) / max(runs, 1))
    return record


def _full(args: argparse.Namespace) -> dict[str, Any]:
    from persched import JobScheduler

    with tempfile.TemporaryDirectory() as where:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.volume_mb}M", "tmpfs", where], check=True)
        try:
            fillers = []
            db = os.path.join(where, "jobs.db")
            sched = JobScheduler(db, workers=4, keep_runs=None)
            for i in range(args.jobs):
                sched.schedule(f"j{i}", TARGET, args.interval, start_in=0)
            # Space to free later, taken now: the WAL then fills the rest of the volume.
            for i in range(args.volume_mb * 1024 * 1024 // 4 // CHUNK):
                path = os.path.join(where, f"filler{i}")
                with open(path, "wb") as f:
                    f.write(b"\0" * CHUNK)
                fillers.append(path)
            sched.start()
            with _reader(db):
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and os.statvfs(where).f_bavail > 0:
                    time.sleep(0.05)
                time.sleep(1.0)  # writes fail and are retried: the volume is full
            sched.shutdown(wait=True, timeout=10)
            wal, size = _size(db + "-wal"), _size(db)
            freed, done = 0, False
            while not done:
                with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
                    try:
                        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                        done = busy == 0 and _size(db + "-wal") == 0
                    except sqlite3.OperationalError:
                        done = False
                if done or not fillers:
                    break
                os.unlink(fillers.pop())
                freed += CHUNK
            return {
                "measurement": "full",
                "volume": args.volume_mb << 20,
                "wal_when_full": wal,
                "db_when_full": size,
                "db_after_checkpoint": _size(db),
                "freed_before_checkpoint": freed,
                "checkpointed": done,
            }
        finally:
            subprocess.run(["umount", where], check=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--volume-mb", type=int, default=16)
    p.add_argument("--only", nargs="*", choices=["steady", "reader", "full"], default=["steady", "reader", "full"])
    args = p.parse_args()
    for name in args.only:
        if name == "full":
            record = _full(args)
        else:
            with tempfile.TemporaryDirectory() as where:
                record = _workload(os.path.join(where, "jobs.db"), args, name, read=name == "reader")
        print(json.dumps(record), flush=True)  # noqa: T201 - a benchmark prints its numbers


if __name__ == "__main__":
    main()
