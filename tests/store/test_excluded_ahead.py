"""A next slot that excluded dates pushed far ahead is within its schedule: no correction path moves
it back (docs/reference/behaviour.md, "Clock corrections across a restart", and "Excluded dates")."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Final

from persched._model.instant import Instant, Micros, from_datetime
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Store
from tests.support import race_jobs
from tests.support.store_calls import claim_one, finish_one

UTC: Final = timezone.utc
ME: Final = "me:1:aaaaaa"
LEASE: Final = Micros(30_000_000)


def instant(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0) -> Instant:
    return from_datetime(datetime(year, month, day, hour, minute, second, us, tzinfo=UTC))


def test_a_fixed_delay_slot_at_the_end_of_an_excluded_date_is_not_corrected_by_any_path(store: Store) -> None:
    policies = validate_policies(14 * 3600.0, recurrence="fixed_delay", exclude=["2027-03-27", "2027-03-29"])
    definition = validate_definition("d", race_jobs.RECORD, policies, ("d",), {}, None)
    job, _, _ = store.upsert_job(definition, instant(2027, 3, 26, 10, 15, 23, 456_789))
    first = from_datetime(job.next_run_at)
    assert first == instant(2027, 3, 28)  # 14 h on is the 27th, excluded
    claimed = claim_one(store, "d", job.generation, first, first, ME, LEASE)
    assert isinstance(claimed, Claim)
    # Ends at 12:00: 14 h on is the 29th, excluded too; the next run waits for the 30th (37 h on).
    ended = instant(2027, 3, 28, 12, 0, 0, 123_457)
    assert finish_one(store, claimed, ME, ended, "ok", None) == instant(2027, 3, 30)
    seq = store.change_seq() - 1
    # Read by a clock an hour behind the one that ran it (beyond the skew floor): still within its
    # schedule, so the start-up sweep, the change pick-up and a claim's miss all leave it alone.
    now = Instant(ended - 3600 * 1_000_000 + 1)
    _, corrections, _ = store.sweep(None, 10_000, now)
    assert corrections == []
    _, changed = store.changes_since(seq, None, now)
    assert [job_id for _, job_id, _ in changed] == ["d"]
    missed = claim_one(store, "d", job.generation, first, now, ME, LEASE)  # a stale entry: a miss
    assert isinstance(missed, ClaimMiss)
    got = store.get_job("d")
    assert got is not None
    assert from_datetime(got.next_run_at) == instant(2027, 3, 30)
