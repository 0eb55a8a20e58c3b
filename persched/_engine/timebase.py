"""The scheduler's time frame: monotonic time, labelled with wall-clock instants.

A scheduler reads the wall clock once, when it is made, and then tells time as
``monotonic + offset`` in microseconds, so a step of the system clock neither
bursts runs nor stalls them (docs/reference/behaviour.md, "Time"). `shift` moves
the frame onto the database's time (`persched._engine.skew`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._model.instant import Instant

if TYPE_CHECKING:
    from .._model.instant import Micros
    from ..clock import Clock

__all__ = ["Timebase"]


class Timebase:
    """`now()` as an `Instant`, following the monotonic clock from one wall reading."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._offset = clock.now_us() - clock.monotonic_us()

    def now(self) -> Instant:
        return Instant(self.clock.monotonic_us() + self._offset)

    def shift(self, by: Micros) -> None:
        """Move the frame by `by` (`persched._engine.skew`); one attribute, replaced whole."""
        self._offset += by
