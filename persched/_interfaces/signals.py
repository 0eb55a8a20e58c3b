"""A stop request from SIGINT or SIGTERM, for a main thread that waits for one.

The handler only puts on a `queue.SimpleQueue` (``put`` is reentrant): ``Event.set()`` from a
handler that interrupted ``Event.wait()`` deadlocks. The main thread waits only in timed slices,
so the handler gets to run (docs/explanation/interfaces.md, "Stopping on a signal").
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType

__all__ = ["StopSignals", "run_responsively"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SLICE_SECONDS = 0.5  # the longest a signal handled elsewhere waits for the main thread


class StopSignals:
    """The stop signals received, in order (`received`); `wait` returns once one arrives.

    `handler` is what ``signal.signal`` installs; it takes no lock. `on_signal`, if given, runs first
    in the handler and must take no lock either (the CLI exits there at a second signal).
    """

    def __init__(self, on_signal: Callable[[int], None] | None = None) -> None:
        self.received: list[int] = []
        self._arrived: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._on_signal = on_signal

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self._on_signal is not None:
            self._on_signal(signum)
        self.received.append(signum)
        self._arrived.put(signum)

    def wait(self, timeout: float) -> bool:
        """Whether a stop signal has arrived, waiting up to `timeout` seconds for the first one."""
        if self.received:
            return True
        try:
            self._arrived.get(timeout=timeout)
        except queue.Empty:
            return False
        return True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """`handler` installed for SIGINT and SIGTERM while the block runs; the previous ones after."""
        previous = {sig: signal.signal(sig, self.handler) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def run_responsively(action: Callable[[], None]) -> None:
    """Call `action` on a thread of its own while this (main) thread waits for it in timed slices.

    Signal handlers so run within `SLICE_SECONDS`; an exception of `action` is raised here.
    """
    raised: list[BaseException] = []

    def call() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            raised.append(exc)

    thread = threading.Thread(target=call, name="persched-responsive")
    thread.start()
    while thread.is_alive():
        thread.join(SLICE_SECONDS)
    if raised:
        raise raised[0]
