"""``manage.py persched_run``: the project's scheduler as a process of its own, until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand

from examples.django_app.jobs import declared_jobs
from persched import JobScheduler

if TYPE_CHECKING:
    from argparse import ArgumentParser
    from types import FrameType


class Command(BaseCommand):
    """Declare the project's jobs (with prune), run them, shut down gracefully on SIGINT/SIGTERM."""

    help = "Run this project's persched jobs until SIGINT or SIGTERM; web processes then need to start none."

    def add_arguments(self, parser: ArgumentParser) -> None:
        """``--workers N``: how many runs at once (default ``PERSCHED_WORKERS``)."""
        parser.add_argument("--workers", type=int, default=None, help="runs at once (default: PERSCHED_WORKERS)")

    def handle(self, *args: Any, **options: Any) -> None:  # noqa: ANN401 - Django's command arguments
        """Run until a signal; in-flight runs finish before it returns."""
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()  # only that: the main thread shuts down (no lock or I/O in a signal handler)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            workers = options["workers"] or settings.PERSCHED_WORKERS
            sched = JobScheduler(settings.PERSCHED_DB, workers=workers, namespace=settings.PERSCHED_NAMESPACE)
            with sched:  # start() ... shutdown(wait=True): in-flight runs finish and are recorded
                jobs = sched.declare(declared_jobs(), prune=True)
                self.stdout.write(
                    f"persched: running {len(jobs)} jobs of namespace {sched.namespace!r} as {sched.instance_id}"
                )
                self.stdout.flush()
                while not stop.wait(1.0):  # a timed wait keeps the main thread responsive to signals
                    pass
                self.stdout.write("persched: stopping, in-flight runs finish")
                self.stdout.flush()
            self.stdout.write("persched: stopped")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
