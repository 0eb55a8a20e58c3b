"""How starved of CPU the machine was while a test ran: the runnable tasks against the cores.

A sampler thread reads ``procs_running`` from ``/proc/stat`` (the tasks
runnable at that instant, itself included) every few milliseconds. With r
runnable tasks on n cores, each gets n/r of a core when r > n: the share of
the CPU a runnable task is denied is ``max(0, 1 - n / r)``, averaged over
the samples. 0 on a machine with a core to spare; 0.5 when twice as many
tasks want a core as there are cores; 0.8 at five times. Tests that count
slots on the real clock use it to tell a scheduler that fell behind on its
own from one that was not given a core. Where ``/proc/stat`` is missing it
reads 0 (the strict bound).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["CpuPressure", "slower_by"]

STAT: Final = Path("/proc/stat")
EVERY: Final = 0.02  # seconds between samples


def _runnable() -> int | None:
    """Tasks runnable now, less the sampler itself; None where the kernel does not say."""
    try:
        for line in STAT.read_text().splitlines():
            if line.startswith("procs_running "):
                return max(0, int(line.split()[1]) - 1)
    except (OSError, ValueError):
        return None
    return None


class CpuPressure:
    """Samples the machine's runnable tasks from construction until `stop()`."""

    def __init__(self) -> None:
        self._cores = os.cpu_count() or 1
        self._denied: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="test-cpu-pressure", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(EVERY):
            runnable = _runnable()
            if runnable is None:
                return
            self._denied.append(max(0.0, 1 - self._cores / runnable) if runnable else 0.0)

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join()

    def share(self) -> float:
        """The mean share of the CPU that a runnable task was denied while sampled (0 to 1)."""
        samples = list(self._denied)
        return sum(samples) / len(samples) if samples else 0.0


def slower_by(seconds: float, pressure: CpuPressure, *, at_most: float) -> float:
    """`seconds` of work measured in real time on a machine that denied a share p of the CPU:
    ``seconds / (1 - p)``, but never more than `at_most`, so that the bound still tells the
    slowness it is there for (a timed wait of the code under test) from a busy machine."""
    return min(seconds / max(1e-3, 1 - pressure.share()), at_most)
