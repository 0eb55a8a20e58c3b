"""Module-level jobs that fail with a chained exception, for the tests of what a failure's record and log say."""

from __future__ import annotations

import asyncio

__all__ = ["fail_async", "fail_sync", "lookup"]


class LookupFailed(Exception):
    """A failure of the application's own, with a module-qualified name."""


def lookup(key: str) -> str:
    """Fail the way application code does: deep in a helper."""
    return {"known": "value"}[key]


async def fail_async(key: str) -> None:
    """Await something, then fail with a chain: LookupFailed from a KeyError."""
    await asyncio.sleep(0)
    try:
        lookup(key)
    except KeyError as exc:
        raise LookupFailed(f"no setting {key!r}") from exc


def fail_sync(key: str) -> None:
    """The same failure, from a plain function."""
    try:
        lookup(key)
    except KeyError as exc:
        raise LookupFailed(f"no setting {key!r}") from exc
