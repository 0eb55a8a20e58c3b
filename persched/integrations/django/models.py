"""persched's tables as the admin reads them: unmanaged models (``managed = False``), never migrated by Django.

persched's own revisions own the schema. Only the columns the admin shows are declared. The tables must
be in one of Django's databases: ``PERSCHED["DATABASE"]``, the one of ``PERSCHED["URL"]``.
"""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    """A row of ``persched_jobs``: one job of a namespace."""

    job_id = models.CharField(max_length=200, primary_key=True)
    namespace = models.CharField(max_length=100)
    target = models.CharField(max_length=1000)
    state = models.CharField(max_length=16)
    paused = models.BooleanField()
    next_run_at = models.DateTimeField()
    generation = models.IntegerField()
    run_count = models.IntegerField()
    error_count = models.IntegerField()
    last_outcome = models.CharField(max_length=16, null=True)
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "persched_jobs"
        ordering = ("namespace", "job_id")
        default_permissions = ("view",)
        permissions = (
            ("operate_job", "Can pause, resume and run persched jobs now"),
            ("deschedule_job", "Can deschedule persched jobs"),
        )

    def __str__(self) -> str:
        """The job's id."""
        return str(self.job_id)


class Run(models.Model):
    """A row of ``persched_runs``: one run (or one record of missed slots) of a job."""

    run_id = models.AutoField(primary_key=True)
    job_id = models.CharField(max_length=200)
    generation = models.IntegerField()
    scheduled_for = models.DateTimeField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    outcome = models.CharField(max_length=16, null=True)
    error = models.TextField(null=True)
    instance_id = models.CharField(max_length=255)

    class Meta:
        managed = False
        db_table = "persched_runs"
        ordering = ("-run_id",)
        default_permissions = ("view",)

    def __str__(self) -> str:
        """The run's job and slot."""
        return f"{self.job_id} @ {self.scheduled_for:%Y-%m-%d %H:%M:%S}"
