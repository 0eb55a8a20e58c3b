"""MySQL/MariaDB specifics of the dialect (persched/_store/dialects/mysql.py) that the contract suite only crosses.

History inserts skip a slot the unique index holds and name only the rows
really inserted, on both of the dialect's paths: MariaDB's multi-row
``INSERT … RETURNING`` (which returns the existing row for a skipped one) and
MySQL 8's one INSERT per row (read back by ``lastrowid``). declare() reads
each row as one JSON array, and a row too long for one as it is.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

import pytest
from sqlalchemy import func, select

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Completion, Store
from persched._store import db as _db
from persched._store.schema import runs
from tests.support import race_jobs
from tests.support.engines import MigratedDatabases, engine_named
from tests.support.helpers import EPOCH, TIMEOUT, at_us

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

pytestmark = pytest.mark.mariadb

T: Final = Instant(micros(EPOCH + 0.1234567))  # an odd instant
ME: Final = "me:1:aaaaaa"
LEASE: Final = Micros(30_000_000)
SLOTS: Final = 100


@pytest.fixture
def store(migrated_databases: MigratedDatabases, tmp_path: Path) -> Iterator[Store]:
    """A `Store` on the emptied session MariaDB database (the contract suite's `store`, MariaDB only)."""
    engine = _db.make_engine(migrated_databases.empty(engine_named("mariadb"), tmp_path))
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()


NAMES = ("job_id", "generation", "scheduled_for", "started_at", "instance_id", "lease_until", "run_now")


def _row(store: Store, job_id: str, slot: float, started: float, *, run_now: bool = False) -> tuple[object, ...]:
    """A run's record as the claims insert it (driver values, `Dialect.bind_instant`)."""
    at = store.dialect.bind_instant
    return (job_id, 1, at(at_us(slot)), at(at_us(started)), "me", at(at_us(started + 30)), run_now)


@pytest.mark.parametrize("returning", [True, False], ids=["mariadb-returning", "mysql8-row-by-row"])
def test_history_inserts_skip_a_held_slot_and_name_only_new_rows(
    store: Store, returning: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.engine.dialect, "insert_returning", returning)
    with store.engine.begin() as conn:
        cur = store.dialect.cursor(conn)
        (first,) = store.dialect.insert_new(cur, runs, NAMES, [_row(store, "a", 10, 10)], "job_id, run_id")
        rows = [_row(store, "a", 10, 11), _row(store, "b", 10, 11), _row(store, "a", 10, 11, run_now=True)]
        inserted = store.dialect.insert_new(cur, runs, NAMES, rows, "job_id, run_id")
        total = conn.execute(select(func.count()).select_from(runs)).scalar_one()
    # "a" at slot 10 was held: skipped; "b" and a run-now run of "a" at the same instant are new.
    assert sorted(job_id for job_id, _ in inserted) == ["a", "b"]
    assert first[1] not in {run_id for _, run_id in inserted}
    assert total == 3


def test_claims_of_a_stale_entry_never_make_the_live_claim_pass_the_row_by(store: Store) -> None:
    """Another instance's heap still holds the replaced generation's entry and claims it in a
    loop (each claim misses). The live generation must win every one of its slots: a locking
    read locks each row it looks at before it tests the predicate, so the stale claim used to
    hold the row for a moment, and the live claim's SKIP LOCKED passed it by as if another
    instance were claiming that very slot (and looked again only a slot later)."""
    old, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(30.0), (), {}, None), T)
    job, _, _ = store.upsert_job(validate_definition("a", race_jobs.RECORD, validate_policies(10.0), (), {}, None), T)
    other = Store(_db.make_engine(store.engine.url.render_as_string(hide_password=False)), "other")
    stop = threading.Event()

    def claim_the_stale_entry() -> None:
        far = Instant(T + micros(10_000_000.0))
        while not stop.is_set():
            (miss,) = other.claim_runs([("a", old.generation, far, far)], far, "other:1:bbbbbb", LEASE)
            assert isinstance(miss, ClaimMiss)

    stale = threading.Thread(target=claim_the_stale_entry)
    stale.start()
    lost = []
    try:
        slot = from_datetime(job.next_run_at)
        for _ in range(SLOTS):
            (result,) = store.claim_runs([("a", job.generation, slot, slot)], slot, ME, LEASE)
            if not isinstance(result, Claim):
                lost.append(result)
                continue
            (next_at,) = store.finish_runs([Completion(result, "ok", None, slot)], ME)
            assert next_at is not None
            slot = next_at
    finally:
        stop.set()
        stale.join(TIMEOUT)
        other.engine.dispose()
    assert lost == []


def _jobs(store: Store, job_ids: tuple[str, ...]) -> list[Claim]:
    """Schedule `job_ids` every 10 s from T and claim each one's first slot."""
    slots = []
    for job_id in job_ids:
        definition = validate_definition(job_id, race_jobs.RECORD, validate_policies(10.0), (), {}, None)
        job, _, _ = store.upsert_job(definition, T)
        slots.append((job_id, job.generation, from_datetime(job.next_run_at)))
    now = max(slot for _, _, slot in slots)
    claims = store.claim_runs([(*key, now) for key in slots], now, ME, LEASE)
    assert all(isinstance(c, Claim) for c in claims), claims
    return claims  # type: ignore[return-value]


def test_a_cycles_completions_are_two_statements_whatever_their_number(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyMySQL's executemany sends an UPDATE once per row: the completions of a dispatch cycle
    (a run's record and its job's row each) are one statement each for all of them
    (`Dialect.update_each`), not a round trip per run."""
    import pymysql.connections

    claims = _jobs(store, tuple(f"j{i}" for i in range(12)))
    sent: list[str] = []
    query = pymysql.connections.Connection.query

    def counted(self: pymysql.connections.Connection, sql: str, unbuffered: bool = False) -> int:
        sent.append(sql)
        return query(self, sql, unbuffered)

    monkeypatch.setattr(pymysql.connections.Connection, "query", counted)
    done = Instant(max(c.scheduled_for for c in claims) + micros(1.5))
    due = store.finish_runs([Completion(c, "ok", None, done) for c in claims], ME)
    monkeypatch.undo()
    updates = [q for q in sent if q.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 2, [q[:80] for q in updates]
    assert due == [Instant(c.scheduled_for + micros(10.0)) for c in claims]


def test_update_each_changes_each_row_by_its_own_values_and_counts_the_rows_matched(store: Store) -> None:
    """The one statement (a derived table joined by the WHERE) matches as the executemany of the
    same rows does: by each row's own key (binary: "a" is not "A"), a row whose values are
    already there counted (FOUND_ROWS), a row the WHERE excludes or that is not there left out."""
    claims = {c.job_id: c for c in _jobs(store, ("a", "A", "b", "c"))}
    at = store.dialect.bind_instant
    done = at(Instant(T + micros(20.0)))
    sql = "UPDATE persched_runs SET finished_at = ?, outcome = ?, error = ? WHERE run_id = ? AND outcome IS NULL"

    def write(rows: Sequence[tuple[object, ...]]) -> int:
        with store.engine.begin() as conn:
            return store.dialect.update_each(store.dialect.cursor(conn), sql, rows)

    assert write([(done, "error", "x", claims["c"].run_id), (done, "ok", None, 0)]) == 1  # "c" closed
    rows = [
        (done, "ok", None, claims["a"].run_id),
        (done, "error", "boom", claims["A"].run_id),
        (done, "ok", None, claims["c"].run_id),  # closed already: the WHERE excludes it
        (done, "ok", None, 10**12),  # no such run
    ]
    assert write(rows) == 2
    with store.engine.connect() as conn:
        found = conn.execute(select(runs.c.job_id, runs.c.outcome, runs.c.error, runs.c.finished_at)).all()
    by_job = {job_id: (outcome, error, finished) for job_id, outcome, error, finished in found}
    finished = from_datetime(by_job["a"][2]) if by_job["a"][2] else None
    assert {job_id: value[:2] for job_id, value in by_job.items()} == {
        "a": ("ok", None),
        "A": ("error", "boom"),
        "b": (None, None),
        "c": ("error", "x"),
    }
    assert finished == Instant(T + micros(20.0))


def test_a_declaration_reads_a_row_too_long_for_one_json_array_as_it_is(store: Store) -> None:
    # declare() reads each row as one JSON array (`select_many`); MariaDB gives NULL for an array over
    # max_allowed_packet (16 MiB by default): its rows are then read as they are, and declared over.
    declared = [
        validate_definition(job_id, race_jobs.RECORD, validate_policies(10.0), ("x",), {}, None) for job_id in "ab"
    ]
    for definition in declared:
        store.upsert_job(definition, T, declared=True)
    with store.engine.begin() as conn:
        (packet,) = conn.exec_driver_sql("SELECT @@max_allowed_packet").one()
        if packet // 2 >= 2**24:  # MySQL 8's default of 64 MiB: more than a MEDIUMTEXT holds
            pytest.skip("max_allowed_packet is more than twice what the args column holds")
        # Args of half a packet, valid JSON text of escaped quotes, each of which JSON escapes again.
        conn.exec_driver_sql(
            "UPDATE persched_jobs SET args = CONCAT('[\"', REPEAT('\\\\\"', %s), '\"]') WHERE job_id = 'a'",
            (packet // 4 + 1,),
        )
    upserts, pruned = store.declare_jobs(declared, Instant(T + micros(1.0)), prune=True)
    assert [(u.job.job_id, u.job.args, u.change) for u in upserts] == [
        ("a", ("x",), "replaced"),
        ("b", ("x",), "unchanged"),
    ]
    assert pruned == []
    assert store.get_job("a").args == ("x",)  # type: ignore[union-attr]
