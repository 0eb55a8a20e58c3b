"""Membership rows: which instances share a namespace's work (`persched._engine.membership` decides from them).

Each sharing instance owns one row of ``persched_instances`` and is the only
one that updates it: `beat_membership` counts its ``beats`` up and reads
every row of the namespace in the same transaction. Another instance deletes a
row only once its count stopped moving (`forget_member`, conditional on the
count it saw, so a member that came back in between keeps its row); the
owner deletes its own at shutdown (`leave_membership`).
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

    def beat_membership(
        self, instance_id: str, now: Instant, lease_until: Instant, *, shares: bool
    ) -> dict[str, tuple[int, bool]]:
        """Renew `instance_id`'s row (made if missing) and return every member's beat count and whether it shares.

        `lease_until` is when the row stops counting as alive for a reader of the
        database alone (`persched._store.health`); the members judge each other by `beats`.
        """
        at = to_datetime(now)
        alive_until = to_datetime(lease_until)
        mine = (instances.c.namespace == self.namespace, instances.c.instance_id == instance_id)

        def body(conn: Connection) -> dict[str, tuple[int, bool]]:
            renewed = conn.execute(
                update(instances)
                .where(*mine)
                .values(beats=instances.c.beats + 1, renewed_at=at, lease_until=alive_until, shares=shares)
            )
            if renewed.rowcount == 0:  # joining, or forgotten while cut off
                conn.execute(
                    insert(instances).values(
                        namespace=self.namespace,
                        instance_id=instance_id,
                        started_at=at,
                        renewed_at=at,
                        beats=1,
                        lease_until=alive_until,
                        shares=shares,
                    )
                )
            rows = conn.execute(
                select(instances.c.instance_id, instances.c.beats, instances.c.shares).where(
                    instances.c.namespace == self.namespace
                )
            )
            return {str(member): (int(beats), bool(sharing)) for member, beats, sharing in rows}

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
        """Delete this instance's own row (shutdown): the others take its jobs at their next beat."""
        mine = (instances.c.namespace == self.namespace, instances.c.instance_id == instance_id)
        self._write(lambda conn: conn.execute(delete(instances).where(*mine)), "leave membership")
