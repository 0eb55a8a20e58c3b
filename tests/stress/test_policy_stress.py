"""Many threads pausing, resuming, asking run-now and descheduling at once (real clock).

The invariants: pause is linearized like deschedule, so no run of a job is claimed while it is paused (from
the moment pause() returned until resume() was called), none after
deschedule() returned, and runs of one job never overlap. `Run.started_at`
is the claim's time, read under the store's write lock in the scheduler's
time frame, which is the frame the test reads its marks in.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

import pytest

from persched._model.instant import from_datetime
from persched.errors import SchedulerStateError
from tests.stress.test_stress import scale
from tests.support import race_jobs
from tests.support.helpers import TIMEOUT
from tests.support.seams import now_of

if TYPE_CHECKING:
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.stress

IDS = [f"p{i}" for i in range(6)]


def test_pause_resume_run_now_and_deschedule_from_many_threads(make_scheduler: SchedulerFactory, seed: int) -> None:
    rng_seed = seed
    sched = make_scheduler(real_clock=True, workers=4, start=True)
    for job_id in IDS:
        sched.schedule(job_id, race_jobs.work, 0.004, args=(0.001,), start_in=0)
    paused_windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
    extra_asked = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def controller(job_id: str, rng: random.Random) -> None:
        while not stop.is_set():
            if sched.pause(job_id):
                paused_at = now_of(sched)  # pause() has returned
                time.sleep(rng.uniform(0, 0.03))
                resume_at = now_of(sched)  # resume() not called yet
                paused_windows[job_id].append((paused_at, resume_at))
                assert sched.resume(job_id) is True
            time.sleep(rng.uniform(0, 0.02))

    def poker(rng: random.Random) -> None:
        while not stop.is_set():
            try:
                if sched.run_now(rng.choice(IDS)):
                    extra_asked[0] += 1
            except SchedulerStateError:
                pass  # paused at that moment: refused, as it must be
            time.sleep(rng.uniform(0, 0.005))

    def guarded(fn: object, *args: object) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)  # type: ignore[operator]  # a controller or a poker
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        return threading.Thread(target=body)

    master = random.Random(rng_seed)
    threads = [guarded(controller, job_id, random.Random(master.random())) for job_id in IDS]
    threads += [guarded(poker, random.Random(master.random())) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(2.0 * scale())
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    assert errors == []
    for job_id in IDS:
        assert sched.deschedule(job_id, wait=True, timeout=TIMEOUT) is True
    gone_at = now_of(sched)
    time.sleep(0.05)

    run_now_runs = 0
    for job_id in IDS:
        runs = sorted(sched.runs(job_id, limit=10_000), key=lambda r: r.started_at)
        assert runs, f"{job_id} never ran"
        for run in runs:
            started = from_datetime(run.started_at)
            assert started <= gone_at, f"{job_id} claimed after deschedule returned: {run}"
            for paused_at, resume_at in paused_windows[job_id]:
                assert not paused_at < started < resume_at, f"{job_id} claimed while paused: {run}"
        for before, after in itertools.pairwise(runs):
            assert before.finished_at is not None
            assert before.finished_at <= after.started_at, f"{job_id} overlapped itself: {before} {after}"
        run_now_runs += sum(run.run_now for run in runs)
    assert sum(len(w) for w in paused_windows.values()) > 0
    assert 0 < run_now_runs <= extra_asked[0]
