"""Running the command line as a user does: ``python -m persched ARGS`` in a child process.

The child inherits nothing that would change its answer: no database, namespace
or token from the environment (``PERSCHED_DB``, ``PERSCHED_NAMESPACE``,
``PERSCHED_WEB_TOKEN``) and no table width (``COLUMNS``, ``LINES``: a test run's
own environment may hold them, pytest-xdist workers do), so stdout is a pipe
and tables are never cut unless a test asks for a width.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = ["REPO", "RUN_TIMEOUT", "cli_env", "persched"]

REPO: Final = Path(__file__).resolve().parents[2]
RUN_TIMEOUT: Final = 60.0  # real seconds for one CLI process (the demo takes about 12 s)
_NOT_INHERITED: Final = ("PERSCHED_DB", "PERSCHED_NAMESPACE", "PERSCHED_WEB_TOKEN", "COLUMNS", "LINES")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI child: this repository importable, nothing inherited that changes its output."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def persched(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m persched ARGS`` (stdout a pipe, not a terminal) and return the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "persched", *args],
        cwd=cwd or REPO,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
