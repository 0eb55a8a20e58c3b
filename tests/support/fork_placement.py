"""Child process of the placement test: a "forked workers" placement, then real forks, away from pytest.

    python -m tests.support.fork_placement URL OUT

This process places its jobs in forked workers (as gunicorn's master does
under ``--preload``) and forks a worker; the worker forks a child of its
own (as a request that uses ``multiprocessing`` would). Each writes one
JSON line to OUT: its role, its pid, and the pid of the scheduler it has
(None where it has none). The worker starts and shuts its scheduler down;
only it may have one.
"""

from __future__ import annotations

import json
import os
import sys

from persched import JobScheduler, JobSpec
from persched.errors import SchedulerStateError
from persched.integrations._process import Placement, ProcessScheduler
from tests.support.fork_child import _fork, _reap

JOBS = [JobSpec("placed.tick", "tests.support.fork_child:tick", 3600.0)]


def _line(out: str, role: str, holder: ProcessScheduler) -> None:
    try:
        owner: int | None = int(holder.scheduler.instance_id.split(":")[1])
    except SchedulerStateError:
        owner = None
    with open(out, "a") as f:
        f.write(json.dumps({"role": role, "pid": os.getpid(), "scheduler_of": owner}) + "\n")


def main(url: str, out: str) -> None:
    holder = ProcessScheduler(lambda: JobScheduler(url, workers=1), lambda: JOBS)
    holder.place(Placement("forked workers", "the test's master"))
    _line(out, "master", holder)
    worker = _fork()
    if worker == 0:
        _line(out, "worker", holder)
        grandchild = _fork()
        if grandchild == 0:
            _line(out, "worker's child", holder)
            os._exit(0)
        status = _reap(grandchild)
        holder.shutdown(timeout=10.0)
        os._exit(0 if status == "exit 0" else 1)
    sys.exit(0 if _reap(worker) == "exit 0" else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
