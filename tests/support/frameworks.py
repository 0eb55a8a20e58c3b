"""The web frameworks of the recipes (the ``examples`` extra): required in CI, skipped with a reason elsewhere.

Like the PostgreSQL tests (tests/support/postgres.py): with ``CI`` set (as
.ci/run does, which installs ``persched[examples]``) a missing framework
fails the test, so the recipes' tests can never skip silently in CI; locally
they skip and say which extra to install.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["frameworks_required", "require"]


def frameworks_required() -> bool:
    """True in CI (``CI`` set, as .ci/run does): the framework tests fail there, never skip."""
    return bool(os.environ.get("CI"))


def require(*modules: str) -> None:
    """Import each of `modules`; skip the test if one is missing (fail instead when CI is set)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        message = f"not installed: {', '.join(missing)}; pip install -e '.[examples]'"
        if frameworks_required():
            pytest.fail(f"CI is set, so the framework tests may not skip: {message}")
        pytest.skip(message)
