"""Each attempt of a slot starts at most once, across instances (docs/reference/behaviour.md, "Retries").

Several `Store` objects, each on its own engine (its own connections) and
with its own instance id, share one database on each engine. A job's attempt
1 fails; its attempt 2 is then pending in the job row. The stores claim that
pending attempt at once (a `threading.Barrier` lines their claims up), then a
late store claims it again with the same (now stale) entry: exactly one of
them starts it, as attempt 2 of the same slot, and one run record of that
attempt exists. The winner's attempt fails in turn, and the race is run for
each attempt up to the last. A stress variant races many stores over many
jobs' pending attempts in one batch each.

Broken variants (``xfail(strict=True, raises=AssertionError)``): the claim
without its ``state`` clause (a fixed-delay row stays at its attempt's due
time while it runs, so a late claim starts the job again beside it), and a
claim that decides from the row as it read it before its transaction (no
lock), on a database without the one-run-per-slot-and-attempt index: both
let a second instance start the attempt, so the test must fail on them. The
index alone gone is not a broken variant: the row predicate alone keeps each
attempt to one start, and the test passes.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

import pytest
from sqlalchemy import text

from persched._model.instant import Instant, Micros, from_datetime, micros
from persched._model.models import validate_definition, validate_policies
from persched._store import Claim, ClaimMiss, Completion, Store
from persched._store import db as _db
from persched._store.claim_batch import CLAIM_SELECT
from persched._store.claims import claim_clauses
from persched._store.dialects import Sql
from tests.support import race_jobs
from tests.support.engines import migrate
from tests.support.helpers import EPOCH, TIMEOUT
from tests.support.history import drive

if TYPE_CHECKING:
    from persched import Job
    from persched._store import ClaimEntry

pytestmark = pytest.mark.every_engine

T: Final = Instant(micros(EPOCH) + 123_457)  # an odd instant
LEASE: Final = Micros(30_000_000)
DELAY: Final = 10.0  # retry_delay_seconds
RETRIES: Final = 3

ClaimFn = Callable[[Store, list["ClaimEntry"], Instant, str], list["Claim | ClaimMiss"]]


def _real(store: Store, entries: list[ClaimEntry], now: Instant, who: str) -> list[Claim | ClaimMiss]:
    return store.claim_runs(entries, now, who, LEASE)


def _without_state(store: Store, entries: list[ClaimEntry], now: Instant, who: str) -> list[Claim | ClaimMiss]:
    """The real claim less its ``state`` clause (`race_jobs.claim_without`), entry by entry."""
    broken = race_jobs.claim_without("state")
    return [broken(store, job_id, gen, expected, now, who, LEASE) for job_id, gen, expected, _ in entries]


class _StaleRead:
    """A claim that decides from the rows as they stood when it looked, before its transaction (no
    lock held between the look and the write): `look` reads them, `claim` claims on them."""

    def __init__(self) -> None:
        self.seen: dict[Store, list[tuple[Any, ...]]] = {}

    def look(self, store: Store, entries: list[ClaimEntry]) -> None:
        expected = {(j, g): (e, t) for j, g, e, t in entries}
        predicate = Sql.join(claim_clauses(expected, store.dialect).values(), " AND ")
        statement = f"SELECT {CLAIM_SELECT} FROM persched_jobs WHERE {predicate.text}"  # noqa: S608 - ours
        with store.engine.connect() as conn:
            self.seen[store] = [tuple(r) for r in store.dialect.execute(conn, Sql(statement, predicate.params))]

    def __call__(self, store: Store, entries: list[ClaimEntry], now: Instant, who: str) -> list[Claim | ClaimMiss]:
        rows = self.seen.pop(store)
        with patch.object(store._claims, "_lock", lambda cur, expected: rows):  # the claims part of the store
            return store.claim_runs(entries, now, who, LEASE)


def _broken(name: str, recurrence: str, reason: str) -> Any:  # noqa: ANN401 - pytest's ParameterSet is private
    """A strict-xfail case that must fail on an assertion: a broken variant that crashes proves nothing."""
    mark = pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)
    return pytest.param(name, recurrence, id=f"broken-{name}-{recurrence}", marks=mark)


# --- the database and its stores ---------------------------------------------------------------


def _drop_slot_index(url: str) -> None:
    """Drop the one-run-per-slot-and-attempt index (a database of this test alone)."""
    engine = _db.make_engine(url)
    try:
        on = " ON persched_runs" if engine.dialect.name in ("mysql", "mariadb") else ""
        with engine.begin() as conn:
            conn.execute(text(f"DROP INDEX uq_persched_runs_slot{on}"))
    finally:
        engine.dispose()


@pytest.fixture
def fresh_url(empty_db_url: str) -> str:
    """A database of this test alone (its index may be dropped), migrated to head."""
    migrate(empty_db_url)
    return empty_db_url


@pytest.fixture
def open_stores(fresh_url: str) -> Iterator[Callable[[int], list[Store]]]:
    """Make `n` stores on the test's database, each on its own engine; disposed at teardown."""
    engines: list[Any] = []

    def make(n: int) -> list[Store]:
        made = []
        for _ in range(n):
            engine = _db.make_engine(fresh_url)
            engines.append(engine)
            made.append(Store(engine, _db.mask(engine.url)))
        return made

    yield make
    for engine in engines:
        engine.dispose()


def _schedule(store: Store, job_id: str, recurrence: str) -> Job:
    policies = validate_policies(
        3600.0,
        recurrence=recurrence,
        retries=RETRIES,
        retry_delay_seconds=DELAY,
        retry_backoff=1.0,
        misfire="skip",
        grace_seconds=600,
    )
    definition = validate_definition(job_id, race_jobs.RECORD, policies, (job_id,), {}, 0)
    job, _, _ = store.upsert_job(definition, T)
    return job


def _pending(store: Store, job_id: str) -> tuple[int | None, Instant]:
    job = store.get_job(job_id)
    assert job is not None
    return job.pending_attempt, from_datetime(job.next_run_at)


def _attempt_rows(store: Store, job_id: str) -> Counter[tuple[Instant, int]]:
    """How many run records each (slot, attempt) of `job_id` has."""
    return Counter(
        (from_datetime(r.scheduled_for), r.attempt) for r in store.list_runs(job_id, limit=1_000) if not r.run_now
    )


def _race(
    stores: list[Store],
    entries: list[ClaimEntry],
    now: Instant,
    claim: ClaimFn,
    look: _StaleRead | None,
    name: str = "racer",
) -> list[tuple[Claim, str]]:
    """Every store claims `entries` at once (a barrier before the claims); the claims won, each with
    its instance id."""
    results: list[list[Claim | ClaimMiss]] = [[] for _ in stores]

    def one(i: int, barrier: threading.Barrier) -> None:
        if look is not None:
            look.look(stores[i], entries)
        barrier.wait(TIMEOUT)
        results[i] = claim(stores[i], entries, now, f"{name}-{i}:1:abcdef")

    drive(len(stores), one, TIMEOUT * 3)
    return [(r, f"{name}-{i}:1:abcdef") for i, rs in enumerate(results) for r in rs if isinstance(r, Claim)]


def _claim_variant(name: str, url: str) -> tuple[ClaimFn, _StaleRead | None]:
    if name == "without-state":
        return _without_state, None
    if name in ("stale-read-and-no-index", "no-index"):
        _drop_slot_index(url)
    if name == "stale-read-and-no-index":
        stale = _StaleRead()
        return stale, stale
    return _real, None


@pytest.mark.parametrize(
    ("variant", "recurrence"),
    [
        ("real", "fixed_rate"),
        ("real", "fixed_delay"),
        ("no-index", "fixed_rate"),  # the row predicate alone keeps each attempt to one start
        ("no-index", "fixed_delay"),
        _broken("stale-read-and-no-index", "fixed_rate", "two instances start one attempt"),
        _broken("stale-read-and-no-index", "fixed_delay", "two instances start one attempt"),
        ("without-state", "fixed_rate"),  # a grid row moved on to its next slot: the slot clause holds
        _broken("without-state", "fixed_delay", "the late claim starts the job beside its running attempt"),
    ],
)
def test_instances_racing_for_a_pending_attempt_start_it_once(
    open_stores: Callable[[int], list[Store]], fresh_url: str, recurrence: str, variant: str
) -> None:
    claim, look = _claim_variant(variant, fresh_url)
    owner, *racers, late = open_stores(5)
    job = _schedule(owner, "r", recurrence)
    slot = from_datetime(job.next_run_at)
    first = owner.claim_runs([("r", job.generation, slot, slot)], slot, "owner:1:aaaaaa", LEASE)[0]
    assert isinstance(first, Claim)
    ended = Instant(slot + 1_000_001)
    owner.finish_runs([Completion(first, "error", "boom", ended)], "owner:1:aaaaaa")
    for attempt in range(2, RETRIES + 2):
        pending, due = _pending(owner, "r")
        assert (pending, due) == (attempt, Instant(ended + micros(DELAY))), f"attempt {attempt} is not pending"
        entry = ("r", job.generation, due, due)
        now = Instant(due + 7)
        won = _race(racers, [entry], now, claim, look)
        if look is not None:
            look.look(late, [entry])
        # The same entry again, after the winner's commit, from yet another instance.
        won += _race([late], [entry], Instant(now + 1), claim, look, "late")
        assert len(won) == 1, f"attempt {attempt} started {len(won)} times: {won}"
        [(winner, who)] = won
        assert (winner.attempt, winner.scheduled_for, winner.run_now) == (attempt, slot, False)
        assert _attempt_rows(owner, "r")[(slot, attempt)] == 1
        assert sum(_attempt_rows(owner, "r").values()) == attempt
        ended = Instant(now + 2_000_003)
        owner.finish_runs([Completion(winner, "error", "boom", ended)], who)
    # Out of retries: the row waits for its next slot, and no attempt is pending.
    assert _pending(owner, "r")[0] is None
    assert sorted(_attempt_rows(owner, "r")) == [(slot, k) for k in range(1, RETRIES + 2)]


@pytest.mark.parametrize("recurrence", ["fixed_rate", "fixed_delay"])
def test_many_instances_racing_for_many_pending_attempts_start_each_once(
    open_stores: Callable[[int], list[Store]], recurrence: str
) -> None:
    owner, *racers = open_stores(9)
    job_ids = [f"s{i:02d}" for i in range(24)]
    jobs = {job_id: _schedule(owner, job_id, recurrence) for job_id in job_ids}
    slot = from_datetime(jobs[job_ids[0]].next_run_at)
    firsts = owner.claim_runs([(j, job.generation, slot, slot) for j, job in jobs.items()], slot, "owner:1:a", LEASE)
    assert all(isinstance(c, Claim) for c in firsts)
    ended = Instant(slot + 1_000_001)
    owner.finish_runs([Completion(c, "error", "boom", ended) for c in firsts if isinstance(c, Claim)], "owner:1:a")
    for attempt in range(2, RETRIES + 2):
        due = Instant(ended + micros(DELAY))
        assert {_pending(owner, j) for j in job_ids} == {(attempt, due)}
        # Each racer takes the jobs in its own order, so that the batches overlap every way.
        entries = [(j, jobs[j].generation, due, due) for j in job_ids]
        won = _race_each(racers, entries, Instant(due + 5))
        by_job = Counter(c.job_id for c, _ in won)
        assert by_job == Counter(job_ids), f"attempt {attempt}: starts per job {by_job}"
        assert {(c.attempt, c.scheduled_for) for c, _ in won} == {(attempt, slot)}
        ended = Instant(due + 3_000_007)
        for who in {w for _, w in won}:
            owner.finish_runs([Completion(c, "error", "boom", ended) for c, w in won if w == who], who)
    for job_id in job_ids:
        assert _attempt_rows(owner, job_id) == Counter({(slot, k): 1 for k in range(1, RETRIES + 2)}), job_id


def _race_each(stores: list[Store], entries: list[ClaimEntry], now: Instant) -> list[tuple[Claim, str]]:
    """`_race`, each store with the entries in an order of its own (rotated)."""
    won: list[tuple[Claim, str]] = []
    lock = threading.Lock()

    def one(i: int, barrier: threading.Barrier) -> None:
        shift = i * len(entries) // len(stores)
        mine = entries[shift:] + entries[:shift]
        who = f"stress-{i}:1:abcdef"
        barrier.wait(TIMEOUT)
        results = stores[i].claim_runs(mine, now, who, LEASE)
        with lock:
            won.extend((c, who) for c in results if isinstance(c, Claim))

    drive(len(stores), one, TIMEOUT * 3)
    return won
