"""Stored arguments edited by hand are read as ``json.loads`` reads them (persched reads them with
``raw_decode`` first, `mappers._json_loads`), on every engine: white space around the value is JSON,
anything after it is not, and a value nested past the recursion limit is unreadable, on its own job,
never an error of the listing or of the claim that meets it (a claim does not read the arguments:
the run does, and records an "error" saying why; tests/scheduler/test_corrupt_rows.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import update

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._store import Claim
from persched._store.schema import jobs
from tests.support.helpers import EPOCH
from tests.support.store_calls import schedule_each

if TYPE_CHECKING:
    from persched._store import Store

T: Final = Instant(micros(EPOCH + 0.1234567))
LEASE: Final = Micros(30_000_000)

READABLE: Final = {"spaced": ' \n[1, "x"]\t', "twice": '{"k": 1, "k": 2}'}  # json.loads takes both
UNREADABLE: Final = {"trailing": '[1, "x"] [2]', "deep": "[" * 100_000 + "]" * 100_000, "nan": "NaN"}


@pytest.mark.parametrize("column", ["args", "kwargs"])
def test_hand_edited_json_is_read_as_json_loads_reads_it_and_costs_only_its_job(store: Store, column: str) -> None:
    edits = {**READABLE, **UNREADABLE}
    schedule_each(store, ["good", *edits], T)
    with store.engine.begin() as conn:
        for job_id, value in edits.items():
            if column == "kwargs" and job_id == "spaced":
                value = ' \n{"x": [1]}\t'
            if column == "args" and job_id == "twice":
                value = " [1]"
            conn.execute(update(jobs).where(jobs.c.job_id == job_id).values({column: value}))
    listed = {job.job_id: job for job in store.list_jobs()}
    assert set(listed) == {"good", *edits}
    unreadable = {job_id for job_id, job in listed.items() if job.unreadable is not None}
    assert unreadable == set(UNREADABLE)
    assert all(column in (listed[job_id].unreadable or "") for job_id in UNREADABLE)
    entries = [(job.job_id, job.generation, from_datetime(job.next_run_at)) for job in listed.values()]
    now = max(slot for _, _, slot in entries)
    results = store.claim_runs([(*e, now) for e in entries], now, "me", LEASE)
    assert all(isinstance(result, Claim) for result in results), results
