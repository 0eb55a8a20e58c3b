"""What ``declare()`` finds changed: any field of a spec, and any hand edit of a stored definition.

A declaration compares each stored row with its spec and leaves an identical job untouched (same
generation, same grid, nothing written). Here, on every engine: a spec that differs from the stored
job in any one field replaces the job, and a row edited by hand so that it no longer holds its spec
(a definition column changed, or made unreadable) is replaced too, never kept as if unchanged.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final

import pytest

from persched import JobScheduler, JobSpec
from persched._model.declare import SCHEDULE_OPTIONS
from persched.testing import FakeClock
from tests.support.helpers import db_sql

if TYPE_CHECKING:
    from persched import Job

START: Final = 1_700_000_000.123457
TARGET: Final = "tests.support.jobs:record"
OTHER_TARGET: Final = "tests.support.jobs:block"
WINDOW: Final = datetime(2031, 12, 20, 4, 5, 6, 123457, tzinfo=timezone.utc)
INTERVAL: Final = 90.5
# Every option given, none at its default: each can be changed alone.
OPTIONS: Final[dict[str, Any]] = {
    "args": (1, "é"),
    "kwargs": {"k": 1},
    "grace_seconds": 2.0,
    "jitter_seconds": 1.5,
    "misfire": "catch_up",
    "max_catch_up": 3,
    "max_runtime_seconds": 30.0,
    "on_overrun": "stop",
    "executor": "process",
    "stop_grace_seconds": 3.0,
    "overlap": "skip",
    "pause_after_failures": 4,
    "recurrence": "fixed_rate",
    "retries": 2,
    "retry_backoff": 3.0,
    "retry_delay_seconds": 5.0,
    "retry_lost": True,
    "retry_max_delay_seconds": 60.0,
    "start_at": WINDOW,
    "end_at": WINDOW + timedelta(days=3),
    "exclude": ["2031-12-25"],
    "timezone": "Europe/Paris",
}
# Each field of a spec, changed alone: (interval_seconds, options changed; None: left out).
CHANGES: Final[dict[str, tuple[float | None, dict[str, Any]]]] = {
    "interval_seconds": (INTERVAL + 1, {}),
    "args": (INTERVAL, {"args": (1, "e")}),
    "kwargs": (INTERVAL, {"kwargs": {"k": 1.5}}),
    "grace_seconds": (INTERVAL, {"grace_seconds": 2.5}),
    "jitter_seconds": (INTERVAL, {"jitter_seconds": 0.0}),
    "misfire": (INTERVAL, {"misfire": "skip", "max_catch_up": None}),
    "max_catch_up": (INTERVAL, {"max_catch_up": 4}),
    "max_runtime_seconds": (INTERVAL, {"max_runtime_seconds": 30.000001}),
    "on_overrun": (INTERVAL, {"on_overrun": "warn"}),
    "executor": (INTERVAL, {"executor": "thread"}),
    "stop_grace_seconds": (INTERVAL, {"stop_grace_seconds": 4.0}),
    "overlap": (INTERVAL, {"overlap": "forbid"}),
    "pause_after_failures": (INTERVAL, {"pause_after_failures": None}),
    "recurrence": (INTERVAL, {"recurrence": "fixed_delay", "misfire": "coalesce", "max_catch_up": None}),
    "retries": (INTERVAL, {"retries": 3}),
    "retry_backoff": (INTERVAL, {"retry_backoff": 1.0}),
    "retry_delay_seconds": (INTERVAL, {"retry_delay_seconds": 6.0}),
    "retry_lost": (INTERVAL, {"retry_lost": False}),
    "retry_max_delay_seconds": (INTERVAL, {"retry_max_delay_seconds": None}),
    "start_at": (INTERVAL, {"start_at": WINDOW + timedelta(microseconds=1)}),
    "end_at": (INTERVAL, {"end_at": WINDOW + timedelta(days=4)}),
    "exclude": (INTERVAL, {"exclude": ["2031-12-26"]}),
    "timezone": (INTERVAL, {"timezone": "Europe/Berlin"}),
    "cron": (None, {"cron": "5 4 * * *"}),
    "run_at": (
        None,
        {
            "run_at": WINDOW + timedelta(days=1),
            **dict.fromkeys(("start_at", "end_at", "exclude", "misfire", "max_catch_up")),  # no window
        },
    ),
}

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def spec(interval: float | None = INTERVAL, target: str = TARGET, **changed: Any) -> JobSpec:  # noqa: ANN401
    options = {**OPTIONS, **changed}
    return JobSpec("j", target, interval, **{name: value for name, value in options.items() if value is not None})


def declare(app: JobScheduler, *specs: JobSpec) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Job]]:
    """Declare `specs` and a job that never changes; return the ids replaced, unchanged, and the jobs by id."""
    done = app.declare([*specs, JobSpec("same", TARGET, 60.0)])
    return done.replaced, done.unchanged, {job.job_id: job for job in done}


def test_every_option_of_a_spec_has_a_change() -> None:
    assert set(CHANGES) == {"interval_seconds", *SCHEDULE_OPTIONS} - {"start_in"}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_change_of_any_one_field_of_a_spec_replaces_the_job(app: JobScheduler, field: str) -> None:
    declare(app, spec())
    interval, changed = CHANGES[field]
    replaced, unchanged, jobs = declare(app, spec(interval, **changed))
    assert (replaced, unchanged) == (("j",), ("same",))
    assert jobs["j"].generation == 2
    assert declare(app, spec(interval, **changed))[:2] == ((), ("j", "same"))  # now stored as declared


def test_a_change_of_target_replaces_the_job(app: JobScheduler) -> None:
    declare(app, spec())
    replaced, _, jobs = declare(app, spec(target=OTHER_TARGET))
    assert (replaced, jobs["j"].target) == (("j",), OTHER_TARGET)


def test_start_in_is_not_compared(app: JobScheduler) -> None:
    declare(app, spec(start_at=None, start_in=5.0))
    assert declare(app, spec(start_at=None, start_in=7.0))[:2] == ((), ("j", "same"))


# Hand edits of a declared job's row, each leaving a definition that is not the spec's.
HAND_EDITS: Final = {
    "interval": "interval_seconds = 91.5",
    "target": f"target = '{OTHER_TARGET}'",
    "args": "args = '[1, \"e\"]'",
    "kwargs": "kwargs = '{\"k\": 2}'",
    "a policy": "misfire = 'skip'",
    "a count": "retries = 5",
    "a flag": "retry_lost = FALSE",
    "a zone": "timezone = 'Europe/Berlin'",
    "a NULL": "exclude = NULL",
    "an instant": "start_at = end_at",
    "args that are not JSON": "args = 'not json'",
    "a cron": "cron = '5 4 * * *', interval_seconds = NULL",
}


@pytest.mark.parametrize("edit", sorted(HAND_EDITS))
def test_a_row_edited_by_hand_is_replaced_by_its_spec(db_url: str, app: JobScheduler, edit: str) -> None:
    declare(app, spec())
    db_sql(db_url, f"UPDATE persched_jobs SET {HAND_EDITS[edit]} WHERE job_id = 'j'")  # noqa: S608 - ours
    replaced, unchanged, jobs = declare(app, spec())
    assert (replaced, unchanged) == (("j",), ("same",))
    assert (jobs["j"].generation, jobs["j"].unreadable) == (2, None)
    assert declare(app, spec())[:2] == ((), ("j", "same"))  # the row holds its spec again
