"""Membership rows: which instances share a namespace's work (`persched._engine.membership` decides from them).

Each instance owns one row of ``persched_instances`` and is the only one that
updates it: `MembersStore.beat_membership` counts its ``beats`` up, moves its
lease on and reads every row of the namespace in one transaction. Another
instance deletes a row only while its count is the one it saw stop moving
(`MembersStore.forget_member`), so a member that came back keeps its row. A
join and a leave move the change counter, so the others see them within a
pick-up. A count only has to move: at `COUNTER_MAX` (or if SQLite let in a
float or text) it starts again from 1, and is compared exactly as read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sqlalchemy import case, delete, insert, select, update

from .._model.instant import Instant, to_datetime
from .part import Part
from .schema import COUNTER_MAX, instances

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["BeatCount", "MembersStore"]

#: A member's count as read: an int, or what SQLite let in instead (a float it made of one, text).
BeatCount = int | float | str
# The next count: one more, or 1 again at the bound (and past it: a float or text that SQLite let in).
_NEXT_BEAT: Final = case((instances.c.beats < COUNTER_MAX, instances.c.beats + 1), else_=1)


class MembersStore(Part):
    """The membership rows of this store's namespace."""

    def server_time(self) -> Instant:
        """The database's clock now (`Dialect.clock_sql`; SQLite: this machine's, read by the library)."""
        return self._read(self._clock_of, "read the database's clock")

    def _clock_of(self, conn: Connection) -> Instant:
        return self.dialect.raw_instant(conn.exec_driver_sql(self.dialect.clock_sql).scalar_one())

    def beat_membership(
        self,
        instance_id: str,
        now: Instant,
        lease_until: Instant,
        *,
        shares: bool,
        clock_offset: float | None = None,
        read_clock: bool = False,
    ) -> tuple[dict[str, tuple[BeatCount, bool]], Instant | None]:
        """Renew `instance_id`'s row (made if missing); return every member's beat count and whether
        it shares, and with `read_clock` the database's clock read in the same transaction (`server_time`).

        `lease_until` is for readers of the database alone (`persched._store.health`); the members judge
        each other by `beats`. `clock_offset` (seconds, None: not measured) is shown in the row.
        """
        at = to_datetime(now)
        alive_until = to_datetime(lease_until)
        mine = (instances.c.namespace == self.namespace, instances.c.instance_id == instance_id)

        def body(conn: Connection) -> tuple[dict[str, tuple[BeatCount, bool]], Instant | None]:
            server = self._clock_of(conn) if read_clock else None
            renewed = conn.execute(
                update(instances)
                .where(*mine)
                .values(
                    beats=_NEXT_BEAT,
                    renewed_at=at,
                    clock_offset_seconds=clock_offset,
                    lease_until=alive_until,
                    shares=shares,
                )
            )
            if renewed.rowcount == 0:  # joining, or forgotten while cut off
                conn.execute(
                    insert(instances).values(
                        namespace=self.namespace,
                        instance_id=instance_id,
                        started_at=at,
                        renewed_at=at,
                        beats=1,
                        clock_offset_seconds=clock_offset,
                        lease_until=alive_until,
                        shares=shares,
                    )
                )
                self._bump_change_seq(conn)  # tell the others now, not at their next beat
            rows = conn.execute(
                select(instances.c.instance_id, instances.c.beats, instances.c.shares).where(
                    instances.c.namespace == self.namespace
                )
            )
            members = {
                str(member): (beats if isinstance(beats, (int, float)) else str(beats), bool(sharing))
                for member, beats, sharing in rows
            }
            return members, server

        return self._write(body, "renew membership")

    def forget_member(self, instance_id: str, beats: BeatCount) -> bool:
        """Delete `instance_id`'s row if its count is still `beats` (the member stopped beating)."""
        row = (
            instances.c.namespace == self.namespace,
            instances.c.instance_id == instance_id,
            instances.c.beats == beats,
        )
        return bool(self._write(lambda conn: conn.execute(delete(instances).where(*row)).rowcount, "forget a member"))

    def leave_membership(self, instance_id: str) -> None:
        """Delete this instance's own row (shutdown): the others take its jobs at their next pick-up."""
        mine = (instances.c.namespace == self.namespace, instances.c.instance_id == instance_id)

        def body(conn: Connection) -> None:
            if conn.execute(delete(instances).where(*mine)).rowcount:
                self._bump_change_seq(conn)

        self._write(body, "leave membership")

    def member_ids(self) -> frozenset[str]:
        """The instances that have a membership row in this namespace (a read, no renewal)."""
        where = instances.c.namespace == self.namespace
        return self._read(
            lambda conn: frozenset(
                str(m) for m in conn.execute(select(instances.c.instance_id).where(where)).scalars()
            ),
            "read members",
        )
