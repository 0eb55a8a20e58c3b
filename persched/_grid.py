"""Fixed-rate grid arithmetic (SPEC §2), pure and O(1).

A job's slots are ``anchor + k * interval`` for whole ``k >= 0``. Times are
float epoch seconds; every slot is rounded to the microsecond so that the same
slot is the same number everywhere (the store keeps microseconds). Nothing
here loops over missed slots, so a ten-year clock jump costs the same as one
second (FIELD-REPORTS #12).
"""

from __future__ import annotations

import math

__all__ = ["latest_slot_at_or_before", "next_slot_after", "slot"]


def slot(anchor: float, interval: float, k: int) -> float:
    """Return slot number `k` of the grid."""
    return round(anchor + k * interval, 6)


def _index_at_or_before(anchor: float, interval: float, t: float) -> int:
    """The largest `k` with ``slot(k) <= t`` (may be negative)."""
    k = math.floor((t - anchor) / interval)
    # The division is inexact; two fix-ups make the result exact on slots.
    if slot(anchor, interval, k + 1) <= t:
        k += 1
    elif slot(anchor, interval, k) > t:
        k -= 1
    return k


def next_slot_after(anchor: float, interval: float, t: float) -> float:
    """Return the first slot strictly after `t` (the anchor itself if `t` is before it)."""
    k = max(_index_at_or_before(anchor, interval, t) + 1, 0)
    return slot(anchor, interval, k)


def latest_slot_at_or_before(anchor: float, interval: float, t: float, floor: float) -> float:
    """Return the most recent slot at or before `t`, but never earlier than `floor`.

    This is the slot a late run stands for when the slots from `floor` to `t`
    are coalesced into it.
    """
    k = _index_at_or_before(anchor, interval, t)
    return max(slot(anchor, interval, k), floor) if k >= 0 else floor
