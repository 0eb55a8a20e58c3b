"""The model's words: job states, run outcomes, policy choices, the default namespace.

Leaves below `models` and `public_models`, so those import in one direction only.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

__all__ = ["DEFAULT_NAMESPACE", "Executor", "JobState", "Misfire", "OnOverrun", "Outcome", "Overlap", "Recurrence"]

DEFAULT_NAMESPACE: Final = "default"  # every job made before namespaces (revision 0005) is here

Outcome = Literal["ok", "error", "lost", "missed", "stopped"]
Recurrence = Literal["fixed_rate", "fixed_delay"]
Misfire = Literal["coalesce", "skip", "catch_up"]
Overlap = Literal["forbid", "skip"]
OnOverrun = Literal["warn", "stop"]
Executor = Literal["thread", "process"]


class JobState(str, enum.Enum):
    """Where a job stands.

    The store's `state` column holds scheduled, running, finished or
    descheduled; "paused" is its `paused` flag on a job that is not running
    (a paused job whose last run is still finishing shows as running, with
    `Job.paused` set).
    """

    SCHEDULED = "scheduled"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    DESCHEDULED = "descheduled"
