"""Module-level coroutine targets for the policy tests, importable by reference.

Each one awaits once before it records its call (in `tests.support.jobs`'s
registry, with what `persched.current_run()` said), so a coroutine that is
created but never awaited records nothing.
"""

from __future__ import annotations

import asyncio

from tests.support import jobs

__all__ = ["async_capture", "async_fail"]


async def async_capture(key: str) -> None:
    """Yield to the event loop once, then record the call (with `current_run()`)."""
    await asyncio.sleep(0)
    jobs.capture_run(key)


async def async_fail(key: str, message: str) -> None:
    """Yield to the event loop once, record the call, then raise `RuntimeError(message)`."""
    await asyncio.sleep(0)
    jobs.record(key, message)
    raise RuntimeError(message)
