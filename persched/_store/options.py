"""`EngineOptions`: how a SQLite engine waits for locks and syncs, checked once (`EngineOptions.checked`).

A `JobScheduler` and a direct `db.make_engine` call share the rules and
messages; `db.open_engine` takes the checked value as it is. PostgreSQL and
MariaDB ignore both options.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from .._model.checks import positive
from ..errors import InvalidJobError

__all__ = ["MAX_BUSY_TIMEOUT_SECONDS", "EngineOptions", "busy_timeout", "synchronous_level"]

MAX_BUSY_TIMEOUT_SECONDS: Final = 86_400.0  # SQLite takes milliseconds as a C int: one day is plenty
_SYNCHRONOUS: Final = ("OFF", "NORMAL", "FULL", "EXTRA")  # SQLite's PRAGMA synchronous levels


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """How a SQLite engine waits for locks and syncs (ignored by PostgreSQL); build with `checked`."""

    busy_timeout_seconds: float = 5.0  # how long SQLite waits for a lock before a write fails
    synchronous: str = "FULL"  # PRAGMA synchronous, upper case: FULL survives power loss

    @classmethod
    def checked(cls, busy_timeout_seconds: object, synchronous: object) -> EngineOptions:
        """Check both options (raises InvalidJobError naming the argument)."""
        return cls(busy_timeout(busy_timeout_seconds), synchronous_level(synchronous))


def busy_timeout(value: object) -> float:
    """Check `busy_timeout_seconds` (`SchedulerConfig` checks each option in the constructor's order)."""
    return positive("busy_timeout_seconds", value, maximum=MAX_BUSY_TIMEOUT_SECONDS)


def synchronous_level(value: object) -> str:
    """Check `synchronous`: one of SQLite's levels, in any case; returned upper case."""
    sync = value.upper() if isinstance(value, str) else None
    if sync is None or sync not in _SYNCHRONOUS:
        raise InvalidJobError("synchronous", f"must be one of OFF, NORMAL, FULL, EXTRA; got {value!r}")
    return sync
