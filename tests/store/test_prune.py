"""Retention on every engine: `Store.prune_runs` by age and by count, failed runs kept apart.

By age used to fail on MariaDB at every maintenance round (error 1235: no
LIMIT in an IN subquery), so its history grew without bound; the scheduler
tests of retention run on SQLite only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sqlalchemy import update

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim
from persched._store.schema import runs
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


def _runs_ending(store: Store, outcomes: list[str]) -> None:
    """Job "b" every 10 s from T: a run of each slot T + 10 k, ended with ``outcomes[k]`` a second after it
    ("lost" is written as recovery writes it: onto the run record, after an "error" completion)."""
    definition = validate_definition("b", race_jobs.RECORD, validate_policies(10.0), ("b",), {}, 0)
    job, _, _ = store.upsert_job(definition, T)
    for k, outcome in enumerate(outcomes):
        claim = claim_one(store, "b", job.generation, at(10 * k), at(10 * k), ME, LEASE)
        assert isinstance(claim, Claim), claim
        finish_one(store, claim, ME, at(10 * k + 1), "error" if outcome == "lost" else outcome, None)
        if outcome == "lost":
            with store.engine.begin() as conn:
                conn.execute(update(runs).where(runs.c.run_id == claim.run_id).values(outcome="lost"))


def _kept_slots(store: Store) -> list[int]:
    return [round((from_datetime(r.scheduled_for) - T) / 10_000_000) for r in store.list_runs("b")]


# Slots 0-2 failed ("lost" among them), then a burst of successes (slots 3-7).
BURST: Final = ["error", "lost", "error", "ok", "ok", "ok", "ok", "ok"]


def test_prune_by_count_keeps_the_newest_failures_apart_from_keep_runs(store: Store) -> None:
    _runs_ending(store, BURST)
    assert store.prune_runs(at(90), keep_runs=2, keep_seconds=None, keep_error_runs=2, job_ids={"b"}) == 4
    assert _kept_slots(store) == [7, 6, 2, 1]  # the newest 2 runs, and the newest 2 failures


def test_prune_by_count_keeps_every_failure_when_fewer_than_keep_error_runs(store: Store) -> None:
    _runs_ending(store, BURST)
    assert store.prune_runs(at(90), keep_runs=2, keep_seconds=None, keep_error_runs=4, job_ids={"b"}) == 3
    assert _kept_slots(store) == [7, 6, 2, 1, 0]


def test_prune_by_count_keeps_every_failure_without_a_bound(store: Store) -> None:
    _runs_ending(store, BURST)
    assert store.prune_runs(at(90), keep_runs=1, keep_seconds=None, keep_error_runs=None, job_ids={"b"}) == 4
    assert _kept_slots(store) == [7, 2, 1, 0]


def test_failures_among_the_newest_runs_count_for_both_bounds(store: Store) -> None:
    # Failures the newest keep_runs hold anyway are among the newest failures too: nothing extra is kept.
    _runs_ending(store, ["ok", "error", "ok", "error", "error"])
    assert store.prune_runs(at(60), keep_runs=2, keep_seconds=None, keep_error_runs=2, job_ids={"b"}) == 3
    assert _kept_slots(store) == [4, 3]
