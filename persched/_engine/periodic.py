"""What the ``persched-heartbeat`` thread runs: periodic tasks, each due at an instant.

A `PeriodicTask`'s `run` schedules the next round a period on, then does this one
(`round`), so a round that fails is tried again a period later. `round` does one
round and nothing else, so a test calls it directly on a `persched.testing.FakeClock`.
Tasks are used by the heartbeat thread alone: their attributes need no lock.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._model.instant import Micros

__all__ = ["AT_ONCE", "NEVER", "Every", "PeriodicTask"]

AT_ONCE: Final = -(2**63)  # monotonic µs: due at the thread's next look
NEVER: Final = 2**63  # monotonic µs: a task that has nothing left to do


class PeriodicTask(abc.ABC):
    """One of the heartbeat thread's tasks; `name` is what it does, for the log ("renewing membership")."""

    def __init__(self, name: str, period: Micros) -> None:
        self.name: Final = name
        self.period: Final = period
        self.due: int = AT_ONCE  # the first round runs as soon as the thread starts
        self.rounds = 0  # rounds the heartbeat thread ran, failed ones included (tests wait on it)

    def run(self, now: int) -> None:
        """Do the round due at `now` (monotonic µs) and schedule the next one, a period on."""
        self.due = now + self.period
        self.round()

    def failed(self, now: int) -> None:  # noqa: B027 - most tasks need nothing: their next round is scheduled
        """`run` raised at `now`: make sure a later round comes (the default's already is)."""

    @abc.abstractmethod
    def round(self) -> None:
        """Do one round, now (no thread needed: tests call it directly)."""


class Every(PeriodicTask):
    """A task that calls `action` once per `period`."""

    def __init__(self, name: str, period: Micros, action: Callable[[], None]) -> None:
        super().__init__(name, period)
        self._action = action

    def round(self) -> None:
        self._action()
