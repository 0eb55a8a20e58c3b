"""``python manage.py persched ARGS``: the ``persched`` command line on the project's settings.

``run`` without ``--import`` runs ``PERSCHED["JOBS"]`` in this process: a dedicated scheduler process.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from ...._command import run_cli
from ... import conf

if TYPE_CHECKING:
    from collections.abc import Sequence

RUN_JOBS = "persched.integrations.django.run"  # the module `run` imports: its persched_setup declares the jobs


def _args(args: Sequence[str]) -> list[str]:
    """`args`, with ``run`` given the project's jobs: imported from `RUN_JOBS`, their modules allowed."""
    args = list(args)
    given = {arg.split("=", 1)[0] for arg in args}
    if args[:1] == ["run"] and "--import" not in given:
        allowed = [] if "--allow-any-module" in given else [f"--allow={package}" for package in _packages()]
        args[1:1] = ["--import", RUN_JOBS, *allowed]
    return args


def _packages() -> list[str]:
    """The top-level packages of the project's jobs (the settings name them, so they are trusted)."""
    modules = {spec.fn.split(":", 1)[0] if isinstance(spec.fn, str) else spec.fn.__module__ for spec in conf.jobs()}
    return sorted({module.split(".", 1)[0] for module in modules})


class Command(BaseCommand):
    """Delegates every argument to the persched command line."""

    help = "The persched command line (run, migrate, jobs, check, ...) on this project's PERSCHED settings."

    def run_from_argv(self, argv: list[str]) -> None:
        """``manage.py persched ARGS``: every argument after ``persched`` goes to its command line, as is."""
        sys.exit(run_cli(_args(argv[2:]), conf.url(), conf.namespace()))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """``call_command("persched", "jobs", "--json")``: the arguments, as the command line takes them."""
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def handle(self, *args: Any, **options: Any) -> None:  # noqa: ANN401 - Django's command arguments
        """Run the command line; a non-zero exit is a `CommandError` with its code."""
        code = run_cli(_args(args), conf.url(), conf.namespace())
        if code != 0:
            raise CommandError(f"persched exited with status {code}", returncode=code)
