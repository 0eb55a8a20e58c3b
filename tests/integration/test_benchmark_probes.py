"""The benchmark probes that wrap persched's own internals still run.

`benchmarks.slot_timeline` and `benchmarks.dispatch_profile` time the dispatch
path by replacing a few of the engine's and store's methods in their own
process. A rename inside the engine breaks them only when they run (the hand-over
moved into `persched._engine.handover` and the timeline failed with an
AttributeError), so each is run here once on a tiny load: the report must come out.
What they measure is not checked: speed is measured, not tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("probe", "report"),
    [
        (["benchmarks.slot_timeline", "--jobs", "20", "--window", "1", "--warmup", "1"], "runs in the window"),
        (["benchmarks.dispatch_profile", "--jobs", "50", "--window", "1", "--warmup", "1"], "persched_runs"),
    ],
    ids=["slot_timeline", "dispatch_profile"],
)
def test_a_probe_runs_against_the_engine_as_it_is(probe: list[str], report: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *probe], cwd=ROOT, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert report in done.stdout, done.stdout[-3000:]
