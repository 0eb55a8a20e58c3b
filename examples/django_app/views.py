"""``GET /jobs/``: this project's jobs, and which process answered."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.http import JsonResponse

from examples.django_app.scheduler import process_scheduler
from persched.errors import SchedulerStateError

if TYPE_CHECKING:
    from django.http import HttpRequest


def jobs(request: HttpRequest) -> JsonResponse:
    """The jobs of the project's namespace (read through this process's scheduler, started or not)."""
    try:
        jobs = process_scheduler().jobs()
    except SchedulerStateError:  # a request served while the process exits (runserver's reload): shut down
        return JsonResponse({"pid": os.getpid(), "error": "shutting down"}, status=503)
    return JsonResponse({"pid": os.getpid(), "jobs": [job.model_dump(mode="json") for job in jobs]})
