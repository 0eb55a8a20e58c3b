"""A module outside the allow-list of `tests/proof/test_allowlist.py` (imported by `tests.support.allow_bridge`)."""

from __future__ import annotations

from pathlib import Path


def touch(path: str) -> None:
    """Leave a marker: proof that it was called."""
    Path(path).write_text("called")
