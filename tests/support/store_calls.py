"""One-entry forms of the store's batch calls, for tests that schedule, claim or finish runs by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Completion

if TYPE_CHECKING:
    from collections.abc import Iterable

    from persched._model.instant import Instant, Micros
    from persched._store import Store

__all__ = ["claim_one", "claim_won", "finish_one", "schedule_each"]


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


def schedule_each(store: Store, job_ids: Iterable[str], now: Instant, interval: float = 10.0) -> None:
    """`Store.upsert_job` of a job per id, each recording its runs (`race_jobs.RECORD`, args ``(job_id,)``)."""
    from tests.support import race_jobs  # the store's statements (SQLAlchemy): only where jobs are made

    for job_id in job_ids:
        definition = validate_definition(job_id, race_jobs.RECORD, validate_policies(interval), (job_id,), {}, None)
        store.upsert_job(definition, now)


def claim_won(store: Store, job_id: str, due: Instant, instance_id: str, lease: Micros) -> Claim:
    """`claim_one` of generation 1's slot `due`, taken up at `due`, which must win."""
    result = claim_one(store, job_id, 1, due, due, instance_id, lease)
    assert isinstance(result, Claim), result
    return result
