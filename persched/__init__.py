"""persched: durable, thread-safe recurring jobs kept in SQL.

Example::

    from persched import JobScheduler

    with JobScheduler("jobs.db") as sched:
        sched.schedule("report", "myapp.tasks:send_report", 60.0)
        ...
"""

from __future__ import annotations

from ._async import AsyncJobScheduler
from ._declare import JobSpec
from ._events import Event, EventKind
from ._models import Job, JobState, Run
from ._scheduler import JobScheduler, current_run

__all__ = [
    "AsyncJobScheduler",
    "Event",
    "EventKind",
    "Job",
    "JobScheduler",
    "JobSpec",
    "JobState",
    "Run",
    "__version__",
    "current_run",
]

__version__ = "0.1.0"
