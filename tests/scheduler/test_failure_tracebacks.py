"""A failed job's traceback starts at the job's own code and keeps the exception chain.

The frames that only call a job (persched's worker, the asyncio loop that
runs a coroutine, concurrent.futures' hand-over to an application's loop) are
left out of the recorded error and of the logged one, on each way a job
runs: a plain function on a worker, a coroutine on the worker's own loop
(`JobScheduler`), on the application's loop (`AsyncJobScheduler`) and on the
workers' loops (``jobs_on_loop=False``). The chain (``raise ... from``)
is kept, oldest exception first, as the interpreter prints it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Final

import pytest

from persched import AsyncJobScheduler, JobScheduler
from tests.support import failing_jobs
from tests.support.helpers import TIMEOUT, sql

if TYPE_CHECKING:
    from persched.testing import FakeClock

# The job's frames, in order: the handler that raises from, the helper that failed, then the raise.
FRAMES: Final = [
    ("fail_{kind}", "lookup(key)"),
    ("lookup", 'return {"known": "value"}[key]'),
    ("fail_{kind}", 'raise LookupFailed(f"no setting {key!r}") from exc'),
]
_FRAME: Final = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in (?P<name>\S+)\n    (?P<line>.*)$', re.MULTILINE)


def assert_starts_at_the_job(error: str | None, kind: str) -> None:
    assert error is not None
    assert error.startswith(f'Traceback (most recent call last):\n  File "{failing_jobs.__file__}"'), error
    frames = [(m["file"], m["name"], m["line"]) for m in _FRAME.finditer(error)]
    expected = [(failing_jobs.__file__, name.format(kind=kind), line) for name, line in FRAMES]
    assert frames == expected, error
    assert "\nKeyError: 'missing'\n\nThe above exception was the direct cause of the following exception:\n\n" in error
    assert error.endswith("\ntests.support.failing_jobs.LookupFailed: no setting 'missing'\n"), error


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("persched")]


@pytest.mark.parametrize(("target", "kind"), [(failing_jobs.fail_sync, "sync"), (failing_jobs.fail_async, "async")])
def test_on_the_threaded_scheduler(
    sqlite_url: str, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture, target: object, kind: str
) -> None:
    with caplog.at_level(logging.ERROR, logger="persched"), JobScheduler(sqlite_url, clock=fake_clock) as sched:
        sched.schedule("settings", target, 60.0, args=("missing",), start_in=0)  # type: ignore[arg-type]  # a job
        fake_clock.advance(0)
        assert sched.wait_idle(TIMEOUT)
        (run,) = sched.runs("settings")
    assert run.outcome == "error"
    assert run.error is not None
    assert_starts_at_the_job(run.error, kind)
    # Logging is configured (pytest's handlers): the log has the whole text, as recorded.
    assert logged_errors(caplog) == [f"job settings generation 1 raised\n{run.error.rstrip()}"]


@pytest.mark.parametrize("jobs_on_loop", [True, False])
def test_on_the_async_front_end(
    sqlite_url: str, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture, jobs_on_loop: bool
) -> None:
    async def scenario() -> str | None:
        async with AsyncJobScheduler(sqlite_url, clock=fake_clock, jobs_on_loop=jobs_on_loop) as sched:
            await sched.schedule("settings", failing_jobs.fail_async, 60.0, args=("missing",), start_in=0)
            fake_clock.advance(0)
            assert await sched.wait_idle(TIMEOUT)
            (run,) = await sched.runs("settings")
            assert run.outcome == "error"
            return run.error

    with caplog.at_level(logging.ERROR, logger="persched"):
        error = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    assert_starts_at_the_job(error, "async")
    assert error is not None
    assert logged_errors(caplog) == [f"job settings generation 1 raised\n{error.rstrip()}"]


@pytest.mark.parametrize(
    ("stored", "last_line"),
    [
        ('{"a": 1}', """TypeError: the stored args are not a JSON array: '{"a": 1}'"""),
        ("not json", "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_a_run_refused_before_the_job_is_called_keeps_persched_frames(
    sqlite_url: str, fake_clock: FakeClock, stored: str, last_line: str
) -> None:
    # A row edited by hand into args that cannot be used: persched refuses the run before calling the
    # job, so the traceback is persched's own and stays whole (the worker's line names the column).
    with JobScheduler(sqlite_url, clock=fake_clock) as sched:
        sched.schedule("edited", failing_jobs.fail_sync, 60.0, args=("missing",))
        sql(sqlite_url, "UPDATE persched_jobs SET args = ? WHERE job_id = 'edited'", (stored,))
        fake_clock.advance(60)
        assert sched.wait_idle(TIMEOUT)
        (run,) = sched.runs("edited")
    assert run.error is not None
    assert "_engine/workers.py" in run.error.splitlines()[1], run.error
    assert "args" in run.error.splitlines()[2], run.error
    assert run.error.endswith(f"{last_line}\n"), run.error
