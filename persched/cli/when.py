"""The instants the verbs act at: now, and what ``--until`` names (``90m``, ``2h``, ``1d``, or ISO-8601 with offset).

An instant without an offset is refused: it would mean another instant on every host.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from .._model.instant import Instant, from_datetime, micros
from ..clock import SystemClock
from .exits import CliError

__all__ = ["instant_now", "parse_until"]

_SPAN: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}  # seconds
_MAX_SPAN: Final = 10 * 365 * 86_400  # seconds: as far ahead as any instant persched keeps


def instant_now() -> Instant:
    """The instant of the system's wall clock, which the verbs act at."""
    return Instant(SystemClock().now_us())


def parse_until(text: str, now: Instant) -> Instant:
    """The instant of a ``--until`` value, from `now`; CliError saying what is accepted otherwise."""
    span = _SPAN.fullmatch(text.strip())
    if span is not None:
        seconds = float(span.group(1)) * _UNIT[span.group(2)]
        if not 0 < seconds <= _MAX_SPAN:
            raise CliError(f"bad --until {text[:40]!r}: a span must be more than 0 and at most 10 years")
        return Instant(now + micros(seconds))
    try:
        at = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", text.strip()))
    except ValueError:
        raise CliError(
            f"bad --until {text[:40]!r}: give a span (90m, 2h, 1d, 45s) or an ISO-8601 instant with its"
            " offset (2026-12-28T06:00+01:00)"
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise CliError(f"bad --until {text[:40]!r}: say its UTC offset (2026-12-28T06:00+01:00, or Z for UTC)")
    return from_datetime(at)
