"""The names of persched's loggers, as docs/observability.md and docs/operations.md give them.

A logger's name is part of the interface: an application configures it
(``logging.getLogger("persched").setLevel(...)``). So these names are fixed
here, not taken from the module that logs, which may move.
"""

from __future__ import annotations

from typing import Final

LIBRARY: Final = "persched"
"""The scheduler's lines: runs, failures, corrections, what another process changed."""

CLI: Final = "persched.cli"
"""The command line's and the service's own lines (``persched run``, signals)."""

WEB: Final = "persched._web"
"""The dashboard's actions, refusals and sign-ins."""
