"""Sharing the work costs no slots, on one SQLite file.

One instance, then three instances on a fresh file, under the same load
(30 jobs at 0.1-0.3 s, real clocks): three must run at least 85% of the
slots that one runs in the same window. Before the fix they ran 55-60%:
SQLite's busy handler sleeps up to 100 ms between tries, so processes
waiting for the write lock slept through the moments it was free. The
bound is generous on purpose (the real figures are in the report and in
``python -m benchmarks.multi_instance``); exactly-once is checked as in every
multi test, from the run history and from the side effects. The load is
well below what one instance can run on a busy 2-core machine: at 50 jobs,
with the other core spinning and the suite running beside it, one instance
ran 83% and three, which race for every slot, 66%: a measure of
CPU, not of the busy handler.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Final

import pytest

from tests.multi._cluster import (
    check_once,
    cluster,
    deschedule_all,
    effects_of,
    fetch_runs,
    schedule_jobs,
    wait_past,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.slow, pytest.mark.processes]
logger = logging.getLogger(__name__)

INTERVALS: Final = (0.1, 0.15, 0.2, 0.25, 0.3)
JOBS: Final = 30
WARMUP: Final = 1.0  # seconds of slots before the window
WINDOW: Final = 5.0  # seconds of slots measured (about 860 slots at 30 jobs)
BOUND: Final = 0.85  # three instances run at least this share of what one runs
FLOOR: Final = 0.5  # ... on a machine whose other work left them no CPU at all


def _fraction_run(tmp: Path, instances: int) -> tuple[float, float]:
    """Run `instances` processes on a fresh file; the fraction of the window's slots that ran, and
    the share of the CPU that the machine's other work denied meanwhile (`CpuPressure`)."""
    tmp.mkdir()
    url = f"sqlite:///{tmp / 'jobs.db'}"
    jobs = {f"j{i}": INTERVALS[i % len(INTERVALS)] for i in range(JOBS)}
    with cluster(url, tmp, lease=5.0, heartbeat=1.0, pickup=0.5) as c:
        c.start(*(f"i{k}" for k in range(instances)))
        first = schedule_jobs(url, jobs, c.effects, start_in=1.0)
        start = min(first.values()) + timedelta(seconds=WARMUP)
        end = start + timedelta(seconds=WINDOW)
        wait_past(url, list(jobs), end)
        deschedule_all(url, list(jobs))
        c.stop_all()
    runs = fetch_runs(url)
    # No slot twice; coalescing is what this test measures, so it is not bounded here.
    report = check_once(runs, effects_of(c), jobs, first, max_coalesced_fraction=1.0)
    ran = {(r.job_id, r.scheduled_for) for r in runs if start <= r.scheduled_for < end}
    offered = sum(math.floor(WINDOW / interval) for interval in jobs.values())
    logger.info("%d instances: ran %d of %d offered slots; %s", instances, len(ran), offered, report.summary())
    return len(ran) / offered, c.pressure.share()


def test_three_instances_on_one_sqlite_file_run_the_slots_one_runs(tmp_path: Path) -> None:
    one, starved_one = _fraction_run(tmp_path / "one", 1)
    three, starved_three = _fraction_run(tmp_path / "three", 3)
    # Three instances spend more CPU on the same slots than one: where the machine denied the
    # CPU, the share they keep up with falls towards FLOOR (the busy handler's fault showed on
    # an idle machine, 55-60 %).
    starved = max(starved_one, starved_three)
    assert three >= (BOUND - (BOUND - FLOOR) * starved) * one, (
        f"3 instances ran {three:.1%} of the offered slots, 1 instance {one:.1%} "
        f"(CPU denied: {starved_three:.0%} and {starved_one:.0%})"
    )
