"""The project's jobs: plain functions (persched runs them on its worker threads) and the declared set."""

from __future__ import annotations

import os

from django.conf import settings

from persched import JobSpec, current_run
from persched.integrations.django.jobs import django_job


@django_job
def cleanup() -> None:
    """The periodic job: here it only records which process ran which slot (``EXAMPLE_LOG``)."""
    run = current_run()
    log = settings.EXAMPLE_LOG
    if log and run is not None:
        line = f"{run.job_id}\t{run.scheduled_for.isoformat()}\t{os.getpid()}\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write on O_APPEND: lines of processes never interleave
        finally:
            os.close(fd)


def declared_jobs() -> list[JobSpec]:
    """The project's whole set of jobs, declared with prune by whichever process runs them."""
    return [JobSpec("django.cleanup", cleanup, settings.EXAMPLE_INTERVAL)]
