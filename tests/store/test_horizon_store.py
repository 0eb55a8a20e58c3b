"""The bounded heap's store calls (persched._engine.horizon), on SQLite and PostgreSQL:
`load_due` (the refill: a keyset window through the index, with jitter and run-now),
`sweep` (every scheduled row in primary-key batches) and `changes_since(upto=)`."""

from __future__ import annotations

from persched._model.instant import Instant, Micros, to_datetime
from persched._model.triggers import jitter_offset
from persched._store import Store
from tests.store.test_store_contract import T, at, job_row, schedule


def test_load_due_reads_a_keyset_window_in_slot_order(store: Store) -> None:
    for n in range(5):
        schedule(store, job_id=f"tie{n}", start_in=3)  # one instant, more rows than one batch
    schedule(store, job_id="early", start_in=1)
    schedule(store, job_id="late", start_in=50)  # beyond the window
    schedule(store, job_id="paused", start_in=2)
    store.pause_job("paused", T)
    schedule(store, job_id="gone", start_in=2)
    store.deschedule_job("gone", T)
    seen: list[str] = []
    cursor = None
    while True:
        entries, last = store.load_due(cursor, at(10), 2)
        seen += [job_id for _, job_id, _ in entries]
        assert all(due < at(10) for due, _, _ in entries)
        if last is None:
            break
        assert entries  # a full batch always moves the cursor on
        cursor = last
    assert seen == ["early", "tie0", "tie1", "tie2", "tie3", "tie4"]
    assert store.load_due((at(10), ""), at(60), 10) == ([(at(50), "late", 1)], None)


def test_load_due_adds_jitter_and_takes_a_pending_run_now(store: Store) -> None:
    jittered = schedule(store, job_id="j", start_in=5, jitter_seconds=4)
    schedule(store, job_id="r", start_in=30)
    store.request_run_now("r", at(1))
    entries, _ = store.load_due(None, at(6), 10)
    offset = jitter_offset("j", jittered.generation, at(5), Micros(4_000_000))
    assert entries == [(at(5) + offset, "j", 1)]  # the run-now of r is the sweep's, not the window's
    run_now, corrections, last = store.sweep(None, 10, at(1))
    assert (run_now, corrections, last) == ([(at(1), "r", 1)], [], None)


def test_the_jitter_reach_is_the_largest_jitter_of_the_due_times_its_store_handed_out(store: Store) -> None:
    assert store.jitter_reach() == 0
    jitter_offset("elsewhere", 1, at(5), Micros(9_000_000))  # a pure function: nobody's reach
    assert store.jitter_reach() == 0
    schedule(store, job_id="j", start_in=5, jitter_seconds=4)  # its due time goes to the heap
    assert store.jitter_reach() == 4_000_000
    schedule(store, job_id="k", start_in=5, jitter_seconds=2)  # it only grows
    assert store.jitter_reach() == 4_000_000
    other = Store(store.engine, store.url)  # another scheduler of this process, on the same database
    assert other.jitter_reach() == 0  # one store's, not the process's
    other.load_due(None, at(6), 10)  # a refill hands out the jittered rows' due times
    assert other.jitter_reach() == 4_000_000


def test_sweep_walks_every_scheduled_row_in_batches(store: Store) -> None:
    for n in range(7):
        schedule(store, job_id=f"s{n}", start_in=n)
        store.request_run_now(f"s{n}", T)
    store.deschedule_job("s3", T)
    found: list[str] = []
    after = None
    while True:
        run_now, _, after = store.sweep(after, 2, T)
        found += [job_id for _, job_id, _ in run_now]
        if after is None:
            break
    assert found == ["s0", "s1", "s2", "s4", "s5", "s6"]


def test_changes_since_upto_leaves_later_jobs_to_the_refill(store: Store) -> None:
    seq = store.change_seq()
    schedule(store, job_id="near", start_in=5)
    schedule(store, job_id="far", start_in=500)
    schedule(store, job_id="far-run-now", start_in=500)
    store.request_run_now("far-run-now", T)
    _, changed = store.changes_since(seq, at(60))
    assert sorted(job_id for _, job_id, _ in changed) == ["far-run-now", "near"]
    _, everything = store.changes_since(seq)
    assert len(everything) == 3


def test_a_sweep_held_before_it_corrects_keeps_a_row_written_meanwhile(store: Store) -> None:
    """The sweep reads the clock again once it read the rows it corrects: a time read before its thread
    was held would take a row written meanwhile (here at +130 s, next run +180 s) for one written by a
    clock ahead, and move it back onto a slot that passed."""
    schedule(store, at(130), job_id="a", start_in=50)
    reads = iter([T])  # the first read, before the thread was held; every later one is +130 s

    def clock() -> Instant:
        return next(reads, at(130))

    _, corrections, _ = store.sweep(None, 10, clock)
    assert corrections == []
    assert job_row(store).next_run_at == to_datetime(at(180))
    # The same row against the stale time alone: it is taken for one written ahead and moved back.
    _, corrections, _ = store.sweep(None, 10, T)
    assert [c.job_id for c in corrections] == ["a"]
