"""Which live instance owns which job, when several share one namespace's work.

Each beat renews this instance's row in ``persched_instances`` and reads the
others' in one transaction. The *view* is this instance and every member whose
beat count moved within the last lease of the local monotonic clock, so a stepped
clock cannot fake a death; a member provably gone (`persched._engine.liveness`) is
dropped at once.

Ownership is by owner bucket: a job_id falls in one of `BUCKETS` buckets
(`persched._model.buckets`, stored in its row), and a bucket's owner is the
member with the highest ``blake2b(member, bucket)`` (rendezvous hashing): a join
or leave moves only that member's share. The buckets this instance owns are
computed once per view change (`owned_buckets`), so a refill asks the database
for their rows only. Views may differ for up to a lease; a slot still runs once,
since that is the claim's guarantee, not the view's (docs/multi.md, "How
instances share the work").

The view is a tuple replaced whole by the heartbeat thread; other threads read it
without a lock.
"""

from __future__ import annotations

import logging
from hashlib import blake2b
from typing import TYPE_CHECKING

from .. import _loggers
from .._model.buckets import BUCKETS, bucket_of
from .._model.instant import Instant
from ..errors import StoreError
from .liveness import provably_dead

if TYPE_CHECKING:
    from .._model.instant import Micros
    from .._store import Store
    from .._store.members import BeatCount
    from .skew import ClockCheck
    from .timebase import Timebase

__all__ = ["Membership", "bucket_owner", "owned_buckets", "owner_among"]

logger = logging.getLogger(_loggers.LIBRARY)


def _score(member: str, bucket: int) -> bytes:
    return blake2b(f"{member}\0{bucket}".encode(errors="surrogatepass"), digest_size=8).digest()


def bucket_owner(members: tuple[str, ...], bucket: int) -> str:
    """The owner of `bucket` among `members` (rendezvous hashing; ties, impossible in practice, by name)."""
    return max(members, key=lambda member: (_score(member, bucket), member))


def owner_among(members: tuple[str, ...], job_id: str) -> str:
    """The owner of `job_id` among `members`: the owner of its bucket."""
    return bucket_owner(members, bucket_of(job_id))


def owned_buckets(members: tuple[str, ...], member: str) -> frozenset[int] | None:
    """The buckets `member` owns among `members`; None when it is the only one (it owns them all)."""
    if members == (member,):
        return None
    return frozenset(bucket for bucket in range(BUCKETS) if bucket_owner(members, bucket) == member)


class Membership:
    """This instance's view of the members of its namespace; `clock_check` reads the database's clock in each beat."""

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        instance_id: str,
        lease: Micros,
        clock_check: ClockCheck,
    ) -> None:
        self._store = store
        self._clock_check = clock_check
        self._timebase = timebase
        self._instance_id = instance_id
        self._lease = lease
        self.members: tuple[str, ...] = (instance_id,)
        # The buckets owned in that view (None: all), replaced with it; read without a lock as it is.
        self.buckets: frozenset[int] | None = None
        # member -> (count seen, monotonic µs when that count was first seen)
        self._seen: dict[str, tuple[BeatCount, int]] = {}

    @property
    def shared(self) -> bool:
        """Whether other members share the work (then the search for overdue rows runs)."""
        return len(self.members) > 1

    def owns(self, job_id: str) -> bool:
        buckets = self.buckets
        return buckets is None or bucket_of(job_id) in buckets

    def beat(self) -> bool:
        """Renew this instance's row and read the others'; return True if the view changed."""
        offset = self._clock_check.offset_seconds

        def round_trip(reads: bool) -> tuple[dict[str, tuple[BeatCount, bool]], Instant | None]:
            now = self._timebase.now()
            return self._store.beat_membership(
                self._instance_id,
                now,
                Instant(now + self._lease),
                shares=True,
                clock_offset=offset,
                read_clock=reads,
            )

        counts = self._clock_check.timed(round_trip)
        mono = self._timebase.clock.monotonic_us()
        live = [self._instance_id]
        seen: dict[str, tuple[BeatCount, int]] = {}
        for member, (beats, shares) in counts.items():
            if member == self._instance_id:
                continue
            previous = self._seen.get(member)
            first_seen = previous[1] if previous is not None and previous[0] == beats else mono
            if provably_dead(member) or mono - first_seen >= self._lease:
                try:
                    forgotten = self._store.forget_member(member, beats)
                except StoreError as exc:  # out of the view all the same, and forgotten at the next beat
                    logger.warning("forgetting instance %s failed, will retry: %s", member, exc)
                    seen[member] = (beats, first_seen)
                    continue
                if forgotten:
                    logger.info("instance %s stopped renewing its membership; its jobs move to the others", member)
                continue
            seen[member] = (beats, first_seen)
            if shares:  # False: an earlier release's share_work=False instance, in no view
                live.append(member)
        self._seen = seen
        view = tuple(sorted(live))
        if view == self.members:
            return False
        logger.debug("instance %s shares the work with %d other instances: %s", self._instance_id, len(view) - 1, view)
        self.buckets = owned_buckets(view, self._instance_id)
        self.members = view
        return True

    def notice(self) -> bool:
        """The change counter moved: beat now if a member's row came or went; return True if the view changed."""
        if self._store.member_ids() == frozenset(self._seen) | {self._instance_id}:
            return False
        return self.beat()

    def leave(self) -> None:
        """Delete this instance's row (shutdown): the others take its jobs at their next pick-up."""
        self._store.leave_membership(self._instance_id)
        self.members = (self._instance_id,)
        self.buckets = None
