"""Owner buckets in the store (`persched._model.buckets`), on every engine.

- Every write of a definition stores its bucket: schedule(), declare(), and a replacement, which
  also fills a bucket that a hand-written row left NULL.
- A refill (`load_due`) given the buckets of one member of four reads only their rows from the
  database, and the rows whose bucket is NULL; its keyset cursor walks them in order. Without
  buckets (a lone instance) it reads every row.
- The start-up sweep keeps to the buckets the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import text

from persched._engine.membership import owned_buckets
from persched._model.buckets import BUCKETS, bucket_of
from tests.store.test_store_contract import T, at, definition, schedule

if TYPE_CHECKING:
    from persched._store import Store

FOUR = ("a:1:aaaaaa", "b:2:bbbbbb", "c:3:cccccc", "d:4:dddddd")
MINE = owned_buckets(FOUR, FOUR[0])
JOBS = [f"job-{n}" for n in range(80)]


def _sql(store: Store, statement: str, **params: object) -> list[tuple[object, ...]]:
    with store.engine.begin() as conn:
        result = conn.execute(text(statement), params)
        return [tuple(row) for row in result] if result.returns_rows else []


def _buckets(store: Store) -> dict[str, object]:
    return dict(_sql(store, "SELECT job_id, owner_bucket FROM persched_jobs"))  # type: ignore[arg-type]


def test_each_member_of_four_owns_a_part_and_together_all_the_buckets() -> None:
    parts = [owned_buckets(FOUR, member) for member in FOUR]
    assert all(part is not None and BUCKETS // 8 < len(part) < BUCKETS // 2 for part in parts)
    assert sum(len(part or ()) for part in parts) == BUCKETS
    assert frozenset().union(*(part or () for part in parts)) == frozenset(range(BUCKETS))
    assert owned_buckets(FOUR[:1], FOUR[0]) is None  # alone: every bucket, no filter


def test_every_write_of_a_definition_stores_its_bucket(store: Store) -> None:
    schedule(store, job_id="scheduled", start_in=5)
    store.declare_jobs([definition(job_id=f"declared-{n}", start_in=5) for n in range(3)], T, prune=False)
    written = ("scheduled", "declared-0", "declared-1", "declared-2")
    assert _buckets(store) == {job_id: bucket_of(job_id) for job_id in written}
    _sql(store, "UPDATE persched_jobs SET owner_bucket = NULL")  # rows written by hand
    schedule(store, job_id="scheduled", interval=20.0)  # a replacement
    store.declare_jobs([definition(job_id="declared-0", interval=20.0)], T, prune=False)
    buckets = _buckets(store)
    assert (buckets["scheduled"], buckets["declared-0"], buckets["declared-1"]) == (
        bucket_of("scheduled"),
        bucket_of("declared-0"),
        None,
    )


def test_a_refill_of_one_member_of_four_reads_only_its_buckets_and_the_null_ones(store: Store) -> None:
    assert MINE is not None
    for n, job_id in enumerate(JOBS):
        schedule(store, job_id=job_id, start_in=1 + n % 7)
    theirs = sorted(job_id for job_id in JOBS if bucket_of(job_id) not in MINE)
    null = theirs[:3]  # their bucket left NULL by hand: every member reads them
    _sql(store, "UPDATE persched_jobs SET owner_bucket = NULL WHERE job_id IN :ids".replace(":ids", str(tuple(null))))
    expected = [job_id for job_id in JOBS if bucket_of(job_id) in MINE or job_id in null]
    assert 0 < len(expected) < len(JOBS) // 2

    entries, last = store.load_due(None, at(10), len(JOBS), MINE)
    assert last is None
    assert sorted(job_id for _, job_id, _ in entries) == sorted(expected)  # the rows the statement returned
    assert entries == sorted(entries)  # in slot order, ties by job_id

    walked: list[str] = []
    cursor = None
    while True:  # the keyset window over the owned rows, 3 at a time
        batch, cursor = store.load_due(cursor, at(10), 3, MINE)
        walked += [job_id for _, job_id, _ in batch]
        if cursor is None:
            break
    assert walked == [job_id for _, job_id, _ in entries]

    everything, _ = store.load_due(None, at(10), len(JOBS) + 1)  # a lone instance: no filter
    assert len(everything) == len(JOBS)


def test_the_sweep_keeps_to_the_buckets_too(store: Store) -> None:
    assert MINE is not None
    for job_id in JOBS[:20]:
        schedule(store, job_id=job_id, start_in=500)
        store.request_run_now(job_id, T)
    run_now, _, last = store.sweep(None, 100, T, MINE)
    assert last is None
    assert sorted(job_id for _, job_id, _ in run_now) == sorted(j for j in JOBS[:20] if bucket_of(j) in MINE)
    run_now, _, _ = store.sweep(None, 100, T)
    assert len(run_now) == 20
