"""The Django admin's pages of persched: jobs and runs, read-only, with pause, resume, run-now and deschedule.

Django's permissions decide: ``"persched.view_job"`` and ``view_run`` read, ``operate_job`` pauses,
resumes and runs now, ``deschedule_job`` deschedules. Actions go through `persched.JobScheduler` in
each job's namespace, never through the ORM.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages

from ..._engine.scheduler import JobScheduler
from ...errors import PerschedError
from . import conf
from .models import Job, Run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.db.models import QuerySet
    from django.http import HttpRequest


class _ReadOnly(admin.ModelAdmin):
    """No add, change or delete through the ORM: persched's API changes jobs."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The rows, from the Django database that holds persched's tables (``PERSCHED["DATABASE"]``)."""
        return super().get_queryset(request).using(conf.database())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ANN401 - a row
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ANN401 - a row
        return False


@contextlib.contextmanager
def _schedulers() -> Iterator[Callable[[str], JobScheduler]]:
    """A scheduler (never started) per namespace on the settings' URL, shut down afterwards."""
    made: dict[str, JobScheduler] = {}

    def of(namespace: str) -> JobScheduler:
        if namespace not in made:
            made[namespace] = JobScheduler(conf.url(), namespace=namespace)
        return made[namespace]

    try:
        yield of
    finally:
        for sched in made.values():
            sched.shutdown()


def _apply(request: HttpRequest, jobs: QuerySet[Job], verb: str, call: Callable[[JobScheduler, str], bool]) -> None:
    done = 0
    try:
        with _schedulers() as scheduler_of:
            for job in jobs:
                done += bool(call(scheduler_of(job.namespace), job.job_id))
    except PerschedError as exc:
        messages.error(request, f"persched: {exc}")
    messages.info(request, f"{verb} {done} of {len(jobs)} jobs")


@admin.register(Job)
class JobAdmin(_ReadOnly):
    """The jobs of every namespace, filtered by state, namespace and pause."""

    list_display = ("job_id", "namespace", "state", "paused", "next_run_at", "last_outcome", "run_count", "error_count")
    list_filter = ("state", "paused", "namespace", "last_outcome")
    search_fields = ("job_id", "target")
    actions = ("pause", "resume", "run_now", "deschedule")

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """Without Django's bulk delete: a job is descheduled through persched, never deleted."""
        found: dict[str, Any] = super().get_actions(request)
        found.pop("delete_selected", None)
        return found

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """``"persched.operate_job"``: pause, resume, run now."""
        return bool(request.user.has_perm("persched.operate_job"))

    def has_deschedule_permission(self, request: HttpRequest) -> bool:
        """``"persched.deschedule_job"``."""
        return bool(request.user.has_perm("persched.deschedule_job"))

    @admin.action(description="Pause the selected jobs", permissions=["operate"])
    def pause(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        """Pause each job (it starts no run until resumed, in any process)."""
        _apply(request, jobs, "paused", lambda sched, job_id: sched.pause(job_id))

    @admin.action(description="Resume the selected jobs", permissions=["operate"])
    def resume(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        """Resume each job on its schedule from now."""
        _apply(request, jobs, "resumed", lambda sched, job_id: sched.resume(job_id))

    @admin.action(description="Run the selected jobs now", permissions=["operate"])
    def run_now(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        """Ask for one extra run of each job, without moving its schedule."""
        _apply(request, jobs, "asked to run", lambda sched, job_id: sched.run_now(job_id))

    @admin.action(description="Deschedule the selected jobs", permissions=["deschedule"])
    def deschedule(self, request: HttpRequest, jobs: QuerySet[Job]) -> None:
        """Deschedule each job: its current definition never starts again."""
        _apply(request, jobs, "descheduled", lambda sched, job_id: sched.deschedule(job_id))


@admin.register(Run)
class RunAdmin(_ReadOnly):
    """The run history, newest first, filtered by outcome."""

    list_display = ("job_id", "scheduled_for", "started_at", "finished_at", "outcome", "instance_id")
    list_filter = ("outcome",)
    search_fields = ("job_id",)
