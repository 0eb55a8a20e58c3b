"""Log lines of refused requests that a flood cannot multiply: at most two lines a minute for each kind."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

from ... import _realtime

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable

__all__ = ["REFUSAL_LOG_SECONDS", "RefusalLog"]

REFUSAL_LOG_SECONDS: Final = 60.0  # seconds between the full lines of one kind of refusal


class RefusalLog:
    """The log of refusals of one server: each kind's first in full, then a count with the next after `interval`.

    Args:
        logger: Where the lines go.
        monotonic: The clock of the intervals (seconds); tests pass their own.
        interval: Seconds between the full lines of one kind.
    """

    def __init__(
        self,
        logger: logging.Logger,
        monotonic: Callable[[], float] = _realtime.monotonic,
        interval: float = REFUSAL_LOG_SECONDS,
    ) -> None:
        self._logger = logger
        self._monotonic = monotonic
        self._interval = interval
        self._lock = threading.Lock()  # guards _kinds: requests are answered on several threads
        self._kinds: dict[str, tuple[float, int, str]] = {}  # kind -> (its line's time, refusals since, the line)

    def refused(self, kind: str, level: int, message: str, *args: object) -> None:
        """Log a refusal of `kind` (``message % args`` at `level`), or count it if one was logged lately."""
        now = self._monotonic()
        with self._lock:
            logged = self._kinds.get(kind)
            if logged is not None and now - logged[0] < self._interval:
                self._kinds[kind] = (logged[0], logged[1] + 1, logged[2])
                return
            line = message % args if args else message
            self._kinds[kind] = (now, 0, line)
        if logged is not None and logged[1]:
            self._logger.log(level, "%d more in the last %.0f s like: %s", logged[1], now - logged[0], logged[2])
        self._logger.log(level, message, *args)
