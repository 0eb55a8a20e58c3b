"""An allowed module that imports callables of other modules (`tests/proof/test_allowlist.py`).

Its own `own` may run under ``allowed_modules=["tests.support"]``; what it
merely imports (`touch`, `foreign_calls.touch`, `os.system`) may not.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.proof import foreign_calls
from tests.proof.foreign_calls import touch

__all__ = ["foreign_calls", "grüße", "os", "own", "threading", "touch"]


def own(path: str) -> None:
    """Defined here: allowed."""
    Path(path).write_text("own")


def grüße(path: str) -> None:
    """Defined here, with a non-ASCII name."""
    Path(path).write_text("grüße")
