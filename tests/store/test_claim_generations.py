"""Two generations of one job in one claim batch: each entry is bounded by its own slot.

A stale heap entry (the replaced generation's) may be due in the same cycle as
the live generation's; the claim's slot bound is per (job_id, generation), so
the stale entry's later bound never lets the live row be claimed before its
slot, and neither entry fails the batch (it used to: the bound was per job_id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss
from tests.support import race_jobs
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T = Instant(micros(EPOCH + 0.1234567))  # an odd instant: whole microseconds, no round grid
ME = "me:1:aaaaaa"
LEASE = Micros(30_000_000)


def at(offset: float) -> Instant:
    return Instant(T + micros(offset))


def _replaced(store: Store) -> tuple[int, int, Instant]:
    """Job "a": generation 1 due at 30 s, replaced by generation 2 due at 10 s; (old, new, new's slot)."""
    old, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(30.0), (), {}, None), T)
    new, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    assert new.generation == old.generation + 1
    return old.generation, new.generation, from_datetime(new.next_run_at)


@pytest.mark.parametrize("stale_first", [True, False], ids=["stale-first", "stale-last"])
def test_a_stale_entry_never_lends_its_bound_to_the_live_generation(store: Store, stale_first: bool) -> None:
    """The live generation's entry is early (a late duplicate, due at 5 s; its slot is 10 s),
    the stale one's bound (30 s) would cover the slot: the live row must not be claimed."""
    old, new, slot = _replaced(store)
    assert slot == at(10)
    live, stale = ("a", new, at(5), at(31)), ("a", old, at(30), at(31))
    entries = [stale, live] if stale_first else [live, stale]
    results = store.claim_runs(entries, at(31), ME, LEASE)
    # Both miss and find the live generation's row; the live entry looks again at its slot.
    assert all(isinstance(r, ClaimMiss) and (r.state, r.generation) == ("scheduled", new) for r in results)
    live_miss = results[entries.index(live)]
    assert isinstance(live_miss, ClaimMiss)
    assert live_miss.due_at == slot
    assert store.list_runs("a") == []


@pytest.mark.parametrize("stale_first", [True, False], ids=["stale-first", "stale-last"])
def test_the_live_generation_runs_beside_its_stale_entry(store: Store, stale_first: bool) -> None:
    """Both due: the live entry claims its own slot, the stale one misses in the same batch."""
    old, new, slot = _replaced(store)
    live, stale = ("a", new, slot, at(31)), ("a", old, at(30), at(31))
    entries = [stale, live] if stale_first else [live, stale]
    results = store.claim_runs(entries, at(31), ME, LEASE)
    claim, miss = results[entries.index(live)], results[entries.index(stale)]
    assert isinstance(claim, Claim), results
    assert (claim.generation, claim.scheduled_for) == (new, at(30))  # coalesced to the latest slot by 31 s
    assert isinstance(miss, ClaimMiss), results
    assert (miss.state, miss.generation, miss.owner) == ("running", new, ME)
    (run,) = store.list_runs("a")
    assert (run.generation, run.run_id) == (new, claim.run_id)
