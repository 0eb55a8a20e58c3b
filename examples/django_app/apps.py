"""The app's ready() hook: it starts nothing (see the package docstring for why), it only connects a receiver."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.signals import request_started


def start_in_web_process(sender: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Django's signal arguments
    """On a request, make this process's scheduler if web processes run jobs (``PERSCHED_IN_WEB_PROCESSES``)."""
    if settings.PERSCHED_IN_WEB_PROCESSES:
        from examples.django_app.scheduler import process_scheduler

        process_scheduler()


class PerschedExampleConfig(AppConfig):
    """The example app."""

    name = "examples.django_app"
    label = "persched_example"

    def ready(self) -> None:
        """Connect the receiver; start no thread and touch no database here.

        ready() runs in every process that loads the project: each
        ``manage.py`` command (``migrate``, ``shell``, ``test``, ...),
        runserver's autoreloader parent (which serves nothing) and its child,
        gunicorn's master with ``--preload`` (a scheduler made there would be
        unusable in the forked workers). A request only reaches a process
        that serves, after any fork, so the receiver is where a web process's
        scheduler may be made.
        """
        request_started.connect(start_in_web_process, dispatch_uid="persched-example-start")
