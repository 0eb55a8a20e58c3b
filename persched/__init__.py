"""persched: durable, thread-safe recurring jobs kept in SQL.

Example::

    from persched import JobScheduler

    with JobScheduler("jobs.db") as sched:
        sched.schedule("report", "myapp.tasks:send_report", 60.0)
        ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._engine.context import RunContext, current_run
    from ._engine.events import Event, EventKind
    from ._engine.scheduler import JobScheduler
    from ._interfaces.async_front import AsyncJobScheduler
    from ._model.declare import DeclareResult, JobSpec
    from ._model.models import Job, JobState, Run

__all__ = [
    "AsyncJobScheduler",
    "DeclareResult",
    "Event",
    "EventKind",
    "Job",
    "JobScheduler",
    "JobSpec",
    "JobState",
    "Run",
    "RunContext",
    "__version__",
    "current_run",
]

__version__ = "0.2.0"  # the one place it is written: pyproject.toml reads it (tool.setuptools.dynamic)

# Where each public name lives. They are imported on first use (PEP 562), so
# that `persched jobs` does not pay for the scheduler and Alembic when it
# only reads rows (`import persched.cli` imports this package first).
_LAZY = {
    "AsyncJobScheduler": "_interfaces.async_front",
    "DeclareResult": "_model.declare",
    "JobSpec": "_model.declare",
    "Event": "_engine.events",
    "EventKind": "_engine.events",
    "Job": "_model.models",
    "JobState": "_model.models",
    "Run": "_model.models",
    "JobScheduler": "_engine.scheduler",
    "RunContext": "_engine.context",
    "current_run": "_engine.context",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'persched' has no attribute {name!r}")
    import importlib  # on first use only

    value = getattr(importlib.import_module(f"persched.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
