"""A module with an import side effect: it writes a marker file when imported.

`tests/proof/test_allowlist.py` proves that persched never imports it when it
is outside `allowed_modules`. The marker path comes from the environment
variable PERSCHED_PROOF_MARKER (nothing is written without it).
"""

from __future__ import annotations

import os
from pathlib import Path

_marker = os.environ.get("PERSCHED_PROOF_MARKER")
if _marker:
    Path(_marker).write_text("imported")


def target() -> None:
    """Would run if scheduled."""
