"""The app's ``ready()``: where this process's jobs run, decided once as the project starts."""

from __future__ import annotations

import os
import sys

from django.apps import AppConfig

from ..._engine.scheduler import JobScheduler
from .._process import Placement, ProcessScheduler, caller, gunicorn_preloading
from . import conf

__all__ = ["PerschedConfig", "process"]

process = ProcessScheduler(lambda: JobScheduler(conf.url(), namespace=conf.namespace(), **conf.options()), conf.jobs)
"""This process's scheduler (`process.scheduler`: the started one; `SchedulerStateError` where none runs)."""


def placement() -> Placement:
    """Return where this process's jobs run (docs/explanation/interfaces.md, "One scheduler per serving process")."""
    if not conf.start():
        return Placement("nowhere", "PERSCHED['START'] is False")
    if gunicorn_preloading():
        return Placement("forked workers", "gunicorn --preload: its master serves nothing, each worker runs the jobs")
    utility = caller("django.core.management", "execute")  # ManagementUtility.execute: a manage.py command
    if utility is not None:
        argv = getattr(utility.f_locals.get("self"), "argv", sys.argv)
        command = argv[1] if len(argv) > 1 else "help"
        if command != "runserver":
            return Placement("nowhere", f"the command '{command}' serves nothing")
        if "--noreload" not in argv and os.environ.get("RUN_MAIN") != "true":
            return Placement("nowhere", "runserver's autoreloader parent serves nothing; its child runs the jobs")
    return Placement("here", "this process serves the project")


class PerschedConfig(AppConfig):
    """persched's Django app."""

    name = "persched.integrations.django"
    label = "persched"
    verbose_name = "persched"

    def ready(self) -> None:
        """Start this process's scheduler if it serves; runs in every process that loads the project."""
        process.place(placement())
