"""One-entry forms of the store's batch calls, for tests that claim or finish one run by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from persched._store import Claim, ClaimMiss, Completion

if TYPE_CHECKING:
    from persched._model.instant import Instant, Micros
    from persched._store import Store

__all__ = ["claim_one", "finish_one"]


def claim_one(
    store: Store, job_id: str, generation: int, expected_at: Instant, now: Instant, instance_id: str, lease: Micros
) -> Claim | ClaimMiss:
    """`Store.claim_runs` for one entry, taken up at `now`."""
    return store.claim_runs([(job_id, generation, expected_at, now)], now, instance_id, lease)[0]


def finish_one(
    store: Store, claim: Claim, instance_id: str, finished_at: Instant, outcome: str, error: str | None
) -> Instant | None:
    """`Store.finish_runs` for one completion."""
    return store.finish_runs([Completion(claim, outcome, error, finished_at)], instance_id)[0]
