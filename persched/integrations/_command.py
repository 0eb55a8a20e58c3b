"""The ``persched`` command line run by a framework's own command (``flask persched``, ``manage.py persched``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cli import main

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["run_cli"]


def run_cli(args: Sequence[str], url: str, namespace: str) -> int:
    """Run ``persched ARGS`` on the application's database and namespace (unless `args` name others); its exit code."""
    given = {arg.split("=", 1)[0] for arg in args}
    preset = [] if "--db" in given else ["--db", url]
    if "--namespace" not in given:
        preset += ["--namespace", namespace]
    return main([*preset, *args])
