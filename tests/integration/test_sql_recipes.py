"""The SQL the docs give users runs on every engine.

docs/how-to/sql.md's queries "that run unchanged" and docs/operations.md's recipes
(one block per engine where the date arithmetic differs) are read from the
documents themselves and run on SQLite, PostgreSQL and MariaDB, against a
database that a scheduler wrote: jobs that ran, one that failed, one paused.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
from sqlalchemy import text

from persched._model.instant import micros, to_datetime
from persched._store import db as _db
from tests.conftest import SchedulerFactory
from tests.support import jobs
from tests.support.helpers import EPOCH, TIMEOUT, wait_finished
from tests.support.mariadb import mariadb_database
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import JobScheduler
    from persched.testing import FakeClock

REPO: Final = Path(__file__).resolve().parents[2]
# docs/operations.md: the label line before each engine's block, and the DURATION each engine spells.
_LABELS: Final = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MySQL and MariaDB"}
_DURATION: Final = {
    "sqlite": "(julianday(finished_at) - julianday(started_at)) * 86400.0",
    "postgresql": "CAST(EXTRACT(EPOCH FROM finished_at - started_at) AS numeric)",
    "mysql": "TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) / 1e6",
}


def _sql_blocks(markdown: str) -> list[tuple[str, str]]:
    """(the paragraph before it, the block) of every fenced ``sql`` block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"([^\n]*)\n\n```sql\n(.*?)```", markdown, re.S)]


def _readme_queries() -> list[str]:
    readme = (REPO / "docs" / "how-to" / "sql.md").read_text(encoding="utf-8")
    section = readme.split("The queries below run unchanged", 1)[1]
    block = section.split("```sql\n", 1)[1].split("```", 1)[0]
    return [q.strip() for q in block.split(";\n") if q.strip()]  # ";" also appears inside a comment


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on each engine: a SQLite file, a PostgreSQL schema, a MariaDB database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'recipes.db'}"
        return
    with pg_schema("recipes") if request.param == "postgres" else mariadb_database("recipes") as url:
        yield url


@pytest.fixture
def written_db(empty_url: str, fake_clock: FakeClock) -> Iterator[str]:
    """A database that a scheduler wrote: two slots of 'good', two failed runs of 'bad', 'idle' paused."""
    url = empty_url
    factory = SchedulerFactory(url, fake_clock)
    try:
        sched = factory(start=True)
        sched.schedule("good", jobs.record, 10.0, args=("good",), start_in=0)
        sched.schedule("bad", jobs.fail, 10.0, args=("bad", "boom"), start_in=0)
        sched.schedule("idle", jobs.record, 60.0, args=("idle",))
        assert sched.pause("idle")
        for n in (1, 2):
            if n > 1:
                fake_clock.advance(10.0)
            wait_finished(sched, "good", n)
            wait_finished(sched, "bad", n)
        factory.close()
        yield url
    finally:
        factory.close()


def _run(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = _db.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = [tuple(row) for row in conn.execute(text(query))]
            conn.rollback()
        return rows
    finally:
        engine.dispose()


def test_the_readme_queries_run_unchanged(written_db: str) -> None:
    queries = _readme_queries()
    assert len(queries) == 6, queries
    results = {q.splitlines()[0]: _run(written_db, q) for q in queries}
    assert {row[0] for row in results[next(k for k in results if k.startswith("-- Next runs"))]} == {"good", "bad"}
    (failed,) = results["-- Jobs whose latest run failed, with their error counts"]
    assert failed[:2] == ("bad", "error")
    per_job = {row[0]: [int(v) for v in row[1:]] for row in results[next(k for k in results if "Runs per job" in k)]}
    assert per_job["bad"][:3] == [2, 0, 2]  # runs, ok, errors
    assert per_job["good"][:2] == [2, 2]
    assert [row[0] for row in results[next(k for k in results if k.startswith("-- Paused jobs"))]] == ["idle"]


def test_the_operations_recipes_run_in_each_dialect(written_db: str) -> None:
    engine = _db.to_url(written_db).get_backend_name()
    doc = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    recipes = doc.split("## SQL recipes", 1)[1].split("\n## ", 1)[0]
    assert f"`{_DURATION[engine]}`" in recipes  # the spelling the doc gives is the one tested
    blocks = _sql_blocks(recipes)
    mine = [block for label, block in blocks if label.startswith(_LABELS[engine]) and "DURATION" not in block]
    assert len(mine) == 1, blocks  # "which jobs failed in the last hour", in this engine's dialect
    # The runs were written at the FakeClock's time, EPOCH (2027): "since an hour ago" holds them.
    assert time.time() < EPOCH
    assert [row[:2] for row in _run(written_db, mine[0])] == [("bad", 2)]
    (p95,) = [block for label, block in blocks if "DURATION" in block]
    rows = _run(written_db, p95.replace("DURATION", _DURATION[engine]))
    assert [row[:2] for row in rows] == [("good", 2)]


@pytest.fixture
def every_state(empty_url: str, fake_clock: FakeClock) -> Iterator[tuple[JobScheduler, str]]:
    """A started scheduler with a job in each state, a paused one whose run is still in flight among them."""
    url = empty_url
    factory = SchedulerFactory(url, fake_clock)
    try:
        sched = factory(start=True)
        sched.schedule("due", jobs.record, 10.0, args=("due",))
        sched.schedule("idle", jobs.record, 10.0, args=("idle",))
        sched.pause("idle")
        sched.schedule("once", jobs.record, args=("once",), run_at=to_datetime(micros(fake_clock.now())))
        sched.schedule("gone", jobs.record, 10.0, args=("gone",))
        sched.deschedule("gone")
        sched.schedule("busy", jobs.block, 10.0, args=("busy",), start_in=0)
        assert jobs.gate("busy").started.wait(TIMEOUT)
        sched.pause("busy")  # paused while its run is in flight: still "running"
        wait_finished(sched, "once", 1)
        yield sched, url
    finally:
        jobs.release_all()
        factory.close()


def test_the_job_states_view_says_what_job_state_says(every_state: tuple[JobScheduler, str]) -> None:
    """persched_job_states.state is Job.state (paused, not the stored 'scheduled'), on every engine;
    its next_run_at is NULL where no run is coming."""
    expected = {
        "due": "scheduled",
        "idle": "paused",
        "once": "finished",
        "gone": "descheduled",
        "busy": "running",
    }
    sched, url = every_state
    assert {job.job_id: job.state.value for job in sched.jobs()} == {k: v for k, v in expected.items() if k != "gone"}
    rows = _run(url, "SELECT job_id, state, paused, next_run_at FROM persched_job_states ORDER BY job_id")
    assert {row[0]: row[1] for row in rows} == expected
    coming = {row[0] for row in rows if row[3] is not None}
    assert coming == {"due"}
    assert {row[0] for row in rows if row[2]} == {"idle", "busy"}
