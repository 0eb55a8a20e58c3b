"""The set-up of README.md's samples: the README is read in terminals, where a hidden comment shows.

Run before the page's first sample, in its namespace: the tour's `sched` (started, on a FakeClock) and
`tasks`, the module its functions live in; `teardown()` runs after the last sample.
"""

from __future__ import annotations

import importlib
import pathlib

from persched import JobScheduler
from persched.testing import FakeClock

pathlib.Path("tour_tasks.py").write_text(
    "def backup(): pass\ndef collect(): pass\ndef crawl(): pass\n"
    "def refresh(): pass\ndef export(): pass\nasync def ping(host): pass\n",
    encoding="utf-8",
)
tasks = importlib.import_module("tour_tasks")
sched = JobScheduler("tour.db", clock=FakeClock())
sched.start()


def teardown() -> None:
    sched.shutdown()
