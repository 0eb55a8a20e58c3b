"""What ``manage.py persched run`` imports: the project's jobs, declared with prune by the dedicated process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import conf

if TYPE_CHECKING:
    from ... import JobScheduler
    from ..._model.declare import JobSpec


def persched_setup(scheduler: JobScheduler) -> list[JobSpec]:
    """The project's jobs (``PERSCHED["JOBS"]``), for ``persched run`` to declare with prune."""
    return conf.jobs()
