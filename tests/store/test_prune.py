"""Retention on every engine: `Store.prune_runs` by age and by count.

By age used to fail on MariaDB at every maintenance round (error 1235: no
LIMIT in an IN subquery), so its history grew without bound; the scheduler
tests of retention run on SQLite only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim
from tests.support import race_jobs
from tests.support.store_calls import claim_one, finish_one

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(1_700_000_123.4567))  # an odd instant
ME: Final = "me:1:aaaaaa"
LEASE: Final = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def _three_runs(store: Store) -> None:
    """Job "a" every 10 s from T: runs of the slots T, T+10 and T+20, each finished a second after its slot."""
    definition = validate_definition("a", race_jobs.RECORD, validate_policies(10.0), ("a",), {}, 0)
    job, _, _ = store.upsert_job(definition, T)
    for k in range(3):
        claim = claim_one(store, "a", job.generation, at(10 * k), at(10 * k), ME, LEASE)
        assert isinstance(claim, Claim), claim
        assert finish_one(store, claim, ME, at(10 * k + 1), "ok", None) is not None


def test_prune_by_age_deletes_the_runs_finished_before_the_cutoff(store: Store) -> None:
    _three_runs(store)
    # At T+25, keeping 10 s: the runs finished at T+1 and T+11 go, the one at T+21 stays.
    assert store.prune_runs(at(25), keep_runs=None, keep_seconds=Micros(10_000_000)) == 2
    assert [from_datetime(r.scheduled_for) for r in store.list_runs("a")] == [at(20)]


def test_prune_by_count_keeps_the_newest_runs_of_a_job(store: Store) -> None:
    _three_runs(store)
    assert store.prune_runs(at(25), keep_runs=1, keep_seconds=None, job_ids={"a"}) == 2
    assert [from_datetime(r.scheduled_for) for r in store.list_runs("a")] == [at(20)]
