"""`persched run --import tests.support.metrics_app`: one job that runs at once, then hourly."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from persched import JobScheduler


def persched_setup(scheduler: JobScheduler) -> None:
    """Schedule "tick" to run at once."""
    scheduler.schedule("tick", "tests.support.cli_jobs:noop", 3600.0, start_in=0)
