"""Membership counts at their bound, on every engine (docs/reference/behaviour.md#counters).

A member's ``beats`` must keep moving for the others to see it alive: at
2**63 - 1 it starts again from 1 instead of failing (PostgreSQL, MariaDB) or
turning into a float (SQLite). A count that is a float already (written by
hand, or by a version that let SQLite overflow) is still a count that the
others can compare and forget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import text

from persched._model.instant import Instant, micros

if TYPE_CHECKING:
    from persched._store import Store
    from persched._store.members import BeatCount

T: Final = Instant(micros(1_700_000_000.25))
ME: Final = "me:1:aaaaaa"
OTHER: Final = "other:2:bbbbbb"


def beat(store: Store, member: str) -> dict[str, BeatCount]:
    """`member` renews its row (made if missing); every member's count as read."""
    members, _ = store.beat_membership(member, T, Instant(T + 30_000_000), shares=True)
    return {name: beats for name, (beats, _) in members.items()}


INT64_MAX: Final = 2**63 - 1


def plant_beats(store: Store, member: str, sql_value: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE persched_instances SET beats = {sql_value} WHERE instance_id = :m"), {"m": member})  # noqa: S608


def test_a_count_at_its_bound_starts_again_and_keeps_moving(store: Store) -> None:
    beat(store, OTHER)
    plant_beats(store, OTHER, str(INT64_MAX))
    seen = beat(store, ME)[OTHER]
    assert seen == INT64_MAX
    moved = beat(store, OTHER)[OTHER]  # used to fail: bigint out of range / a REAL on SQLite
    assert moved == 1
    assert store.forget_member(OTHER, seen) is False  # it moved: alive
    assert store.forget_member(OTHER, moved) is True


@pytest.mark.parametrize("engine_name", ["sqlite"], indirect=True)
@pytest.mark.parametrize("planted", [f"{INT64_MAX} + 1", "'many'"], ids=["float", "text"])
def test_a_count_that_sqlite_let_in_can_be_forgotten(store: Store, planted: str) -> None:
    beat(store, OTHER)
    plant_beats(store, OTHER, planted)  # SQLite's integer overflow is a REAL; its affinity lets text in
    seen = beat(store, ME)[OTHER]
    assert store.forget_member(OTHER, seen) is True  # used to raise OverflowError at every heartbeat
    assert set(beat(store, ME)) == {ME}


@pytest.mark.parametrize("engine_name", ["sqlite"], indirect=True)
def test_a_float_count_of_ones_own_row_moves_again(store: Store) -> None:
    beat(store, OTHER)
    plant_beats(store, OTHER, f"{INT64_MAX} + 1")
    assert beat(store, OTHER)[OTHER] == 1  # a REAL + 1 would stand still: seen as dead
