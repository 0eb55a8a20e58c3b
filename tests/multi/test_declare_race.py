"""Racing declarations from several processes at a deploy converge to one definition per job.

Real processes declare with prune at the same moment (a multiprocessing
Barrier), on every engine; the database is then read through the public API.
They are forked from multiprocessing's fork server, which imported their
module (and persched) once: single-threaded processes with nothing open, as
spawned ones are, without a new interpreter's imports each.
"""

from __future__ import annotations

import multiprocessing
from typing import Final

import pytest

from persched import JobScheduler, JobState
from tests.support.declare_child import declare_in_child

TIMEOUT: Final = 60.0
CONTEXT: Final = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(["tests.support.declare_child"])


def race(url: str, versions: list[str]) -> list[tuple[str, dict[str, int]]]:
    barrier = CONTEXT.Barrier(len(versions))
    results = CONTEXT.Queue()
    children = [CONTEXT.Process(target=declare_in_child, args=(url, v, barrier, results)) for v in versions]
    for child in children:
        child.start()
    try:
        got = [results.get(timeout=TIMEOUT) for _ in children]
    finally:
        for child in children:
            child.join(TIMEOUT)
    assert [child.exitcode for child in children] == [0] * len(children)
    results.close()
    return got


def definitions(url: str) -> dict[str, tuple[float | None, int]]:
    sched = JobScheduler(url, namespace="app")
    try:
        return {job.job_id: (job.interval_seconds, job.generation) for job in sched.jobs()}
    finally:
        sched.shutdown()


@pytest.mark.slow
def test_instances_declaring_one_release_at_once_leave_one_definition_per_job_untouched(db_url: str) -> None:
    got = race(db_url, ["v1"] * 4)
    # Whoever wrote first created each job; the others found it identical: generation 1 everywhere.
    assert all(generations == {"report": 1, "cleanup": 1} for _, generations in got)
    assert definitions(db_url) == {"report": (60.0, 1), "cleanup": (3600.0, 1)}


@pytest.mark.slow
def test_a_rolling_deploy_converges_on_the_release_declared_last(db_url: str) -> None:
    race(db_url, ["v1", "v2", "v1", "v2"])
    mixed = definitions(db_url)
    # Mid-deploy: each declaration commits whole, one after the other, so what remains is
    # exactly the set of the release declared last, never a mix of the two.
    assert {job_id: interval for job_id, (interval, _) in mixed.items()} in (
        {"report": 60.0, "cleanup": 3600.0},
        {"report": 30.0, "export": 600.0},
    )
    race(db_url, ["v2"] * 3)  # every instance runs the new release
    final = definitions(db_url)
    assert {job_id: interval for job_id, (interval, _) in final.items()} == {"report": 30.0, "export": 600.0}
    sched = JobScheduler(db_url, namespace="app")
    try:
        cleanup = [j for j in sched.jobs() if j.job_id == "cleanup"]
        assert cleanup == []  # pruned: v2 no longer declares it
        assert all(j.state == JobState.SCHEDULED and j.declared for j in sched.jobs())
    finally:
        sched.shutdown()
