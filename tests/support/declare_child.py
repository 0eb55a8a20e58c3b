"""Child process of the declare race test: declare one version of an application's job set.

`declare_in_child` runs in a process of its own: it opens a scheduler of
namespace "app" on the URL (not started: declare() writes the store),
waits at the shared barrier so that every child declares at once, declares
the set of `version` with prune, and reports the generation of each job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from persched import JobScheduler, JobSpec

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

TARGET: Final = "tests.support.jobs:record"
TIMEOUT: Final = 60.0


def job_set(version: str) -> list[JobSpec]:
    """The declared jobs of a release: "v1" (report every 60 s, cleanup) or "v2" (report every 30 s, export)."""
    if version == "v1":
        return [JobSpec("report", TARGET, 60.0, args=("report",)), JobSpec("cleanup", TARGET, 3600.0, args=("c",))]
    return [JobSpec("report", TARGET, 30.0, args=("report",)), JobSpec("export", TARGET, 600.0, args=("e",))]


def declare_in_child(url: str, version: str, barrier: Barrier, results: Queue[tuple[str, dict[str, int]]]) -> None:
    """Declare `version`'s set at the barrier; put (version, {job_id: generation}) on `results`."""
    sched = JobScheduler(url, namespace="app")
    try:
        sched.get_job("report")  # migrate before the barrier: the race is between declarations
        barrier.wait(TIMEOUT)
        declared = sched.declare(job_set(version), prune=True)
        results.put((version, {job.job_id: job.generation for job in declared}))
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
