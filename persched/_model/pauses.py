"""The arguments of a pause: when it ends by itself (`until`, ahead of `now`) and why (`note`), checked once.

A timed pause is resumed at `until` by `persched._engine.pause_ends`; `failures_note` is the note of a
``pause_after_failures`` pause (docs/reference/behaviour.md#repeated-failures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import InvalidJobError
from .checks import as_instant, check_encodable
from .instant import to_datetime

if TYPE_CHECKING:
    from .instant import Instant

__all__ = ["FAILED_OUTCOMES", "MAX_PAUSE_NOTE", "check_pause", "failures_note"]

MAX_PAUSE_NOTE: Final = 500  # characters of a pause's note (the pause_note column)
#: The outcomes of a slot that ended in failure: they lengthen a job's failure streak (`pause_after_failures`),
#: and retention keeps the newest of them apart (`keep_error_runs`). A "missed" record is no run: it counts neither way.
FAILED_OUTCOMES: Final = ("error", "lost", "stopped")


def failures_note(failures: int) -> str:
    """The note of a job paused by its `pause_after_failures` option."""
    return f"paused after {failures} consecutive failures"


def check_pause(until: object, note: object, now: Instant) -> tuple[Instant | None, str | None]:
    """`until` as an instant after `now` (or None) and `note` as a str of at most `MAX_PAUSE_NOTE` characters.

    Raises:
        InvalidJobError: Naming the argument and what is wrong with it.
    """
    end = as_instant("until", until)
    if end is not None and end <= now:
        raise InvalidJobError(
            "until",
            f"must lie ahead: {to_datetime(end).isoformat()} is not after now ({to_datetime(now).isoformat()});"
            " to resume at once, call resume()",
        )
    if note is None:
        return end, None
    if not isinstance(note, str):
        raise InvalidJobError("note", f"must be a str, got {type(note).__name__}")
    if len(note) > MAX_PAUSE_NOTE:
        raise InvalidJobError("note", f"must be at most {MAX_PAUSE_NOTE} characters, got {len(note)}")
    check_encodable("note", note)
    return end, note
