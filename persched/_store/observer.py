"""An optional hook for what the events do not carry: claim conflicts, missed slots, store retries.

The default `Observer` does nothing, so the core never needs
``prometheus_client`` (`persched.metrics` subclasses it). Its methods are
called on whichever persched thread saw the thing, with no persched lock
held, and must be quick and thread-safe; one that raises is logged and
ignored (`notify`). Store observations come after their transaction commits,
so a retried transaction is not counted twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Observer", "notify"]

logger = logging.getLogger(__name__)


class Observer:
    """Receives the counts the events do not carry; every method does nothing by default."""

    def claim_conflict(self, job_id: str) -> None:
        """A claim for `job_id` lost: another instance (or a change) moved the row first."""

    def store_retry(self, operation: str) -> None:
        """A transaction of `operation` ("claim", "dispatch", ...) failed transiently and is tried again."""

    def store_error(self, operation: str) -> None:
        """A transaction of `operation` failed for good: its caller gets a `StoreError`."""

    def slots_missed(self, job_id: str, slots: int | None) -> None:
        """A "missed" record was committed for `job_id`, standing for `slots` slots (None: too many to count)."""


def notify(call: Callable[[], object], what: str) -> None:
    """Call an observer method; a failure is logged, never raised into persched."""
    try:
        call()
    except Exception:
        logger.exception("observer failed on %s; ignored", what)
