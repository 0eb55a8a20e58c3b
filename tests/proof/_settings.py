"""Hypothesis and budget settings of the proof suite: bounded by default, larger with PERSCHED_SOAK=1."""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, settings

__all__ = ["SOAK", "fuzz_settings", "scale"]

SOAK: Final = os.environ.get("PERSCHED_SOAK", "") not in ("", "0")


def scale(default: int, soak: int) -> int:
    """`default` normally, `soak` when PERSCHED_SOAK=1."""
    return soak if SOAK else default


def fuzz_settings(examples: int, soak_examples: int | None = None, **kw: object) -> settings:
    """A bounded hypothesis profile: no deadline, no database, scaled by PERSCHED_SOAK; a failure
    prints the ``@reproduce_failure`` line that replays it."""
    return settings(
        max_examples=scale(examples, soak_examples or examples * 20),
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
        **kw,  # type: ignore[arg-type]
    )
