"""Membership rows: which instances share a namespace's work (`persched._engine.membership` decides from them).

Each sharing instance owns one row of ``persched_instances`` and is the only
one that updates it: `beat_membership` counts its ``beats`` up and reads
every row of the namespace in the same transaction. Another instance deletes a
row only once its count stopped moving (`forget_member`, conditional on the
count it saw, so a member that came back in between keeps its row); the
owner deletes its own at shutdown (`leave_membership`).

A join (the row made) and a leave move the change counter, as a job's change
does: the other instances watch it (`persched._engine.heartbeat`) and read
`member_ids` then, so they see a member come or go within a pick-up rather
than at their next beat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import delete, insert, select, update

from .._model.instant import Instant, to_datetime
from ._tx import Transactions
from .schema import instances

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["MembersStore"]


class MembersStore(Transactions):
    """The membership rows of this store's namespace (module docstring)."""

    def beat_membership(self, instance_id: str, now: Instant) -> dict[str, int]:
        """Renew `instance_id`'s row (made if missing) and return every member's beat count."""
        at = to_datetime(now)
        mine = (instances.c.namespace == self.namespace, instances.c.instance_id == instance_id)

        def body(conn: Connection) -> dict[str, int]:
            renewed = conn.execute(update(instances).where(*mine).values(beats=instances.c.beats + 1, renewed_at=at))
            if renewed.rowcount == 0:  # joining, or forgotten while cut off
                conn.execute(
                    insert(instances).values(
                        namespace=self.namespace, instance_id=instance_id, started_at=at, renewed_at=at, beats=1
                    )
                )
                self._bump_change_seq(conn)  # tell the others now, not at their next beat
            rows = conn.execute(
                select(instances.c.instance_id, instances.c.beats).where(instances.c.namespace == self.namespace)
            )
            return {str(member): int(beats) for member, beats in rows}

        return self._write(body, "renew membership")

    def forget_member(self, instance_id: str, beats: int) -> bool:
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
