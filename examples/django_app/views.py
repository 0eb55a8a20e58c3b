"""``GET /jobs/``: this project's jobs, and which process answered."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.http import JsonResponse

from persched.errors import SchedulerStateError
from persched.integrations.django import scheduler

if TYPE_CHECKING:
    from django.http import HttpRequest


def jobs(request: HttpRequest) -> JsonResponse:
    """The jobs of the project's namespace, read through this process's scheduler."""
    try:
        jobs = scheduler().jobs()
    except SchedulerStateError as exc:  # this process runs no jobs (EXAMPLE_START=0), or it is exiting
        return JsonResponse({"pid": os.getpid(), "error": str(exc)}, status=503)
    return JsonResponse({"pid": os.getpid(), "jobs": [job.model_dump(mode="json") for job in jobs]})
