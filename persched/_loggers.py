"""The names of persched's loggers (docs/observability.md): part of the interface, so fixed here.

Not taken from the module that logs, which may move.
"""

from __future__ import annotations

from typing import Final

LIBRARY: Final = "persched"
"""The scheduler's lines: runs, failures, corrections, what another process changed."""

CLI: Final = "persched.cli"
"""The command line's and the service's own lines (``persched run``, signals)."""

WEB: Final = "persched._web"
"""The dashboard's actions, refusals and sign-ins."""
