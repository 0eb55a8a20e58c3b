"""`persched._engine.tracebacks`: a failure as text (the chain kept, the callers' frames left out), as a log record."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from persched._engine import tracebacks as _tracebacks
from persched._engine.tracebacks import describe, log_job_failure
from tests.support import failing_jobs

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest


def caught(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - what a worker catches
        return exc
    raise AssertionError("did not raise")


def raise_from() -> None:
    failing_jobs.fail_sync("missing")


def handled_then_raised() -> None:
    empty: dict[str, int] = {}
    with contextlib.suppress(KeyError):
        empty["a"]  # handled: no context for what follows
    raise RuntimeError("plain")


def test_the_chain_is_kept_oldest_first() -> None:
    text = describe(caught(raise_from))
    assert text.index("KeyError: 'missing'") < text.index("The above exception was the direct cause")
    assert text.endswith("tests.support.failing_jobs.LookupFailed: no setting 'missing'\n")
    assert text.count("Traceback (most recent call last):") == 2


def test_an_exception_raised_while_handling_another_says_so() -> None:
    exc = caught(handled_then_raised)
    assert "During handling" not in describe(exc)  # the KeyError was handled before: no context
    suppressed = ValueError("suppressed")
    suppressed.__context__ = KeyError("hidden")
    suppressed.__suppress_context__ = True
    assert "hidden" not in describe(suppressed)
    context = ValueError("outer")
    context.__context__ = KeyError("inner")
    text = describe(context)
    assert text == (
        "KeyError: 'inner'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "ValueError: outer\n"
    )


def test_a_chain_that_loops_ends() -> None:
    first, second = ValueError("first"), ValueError("second")
    first.__cause__, second.__cause__ = second, first
    assert describe(first).count("ValueError") == 2


def test_user_code_leaves_out_the_callers_frames_but_never_all_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = caught(raise_from)  # this test module's frames, then the job's
    assert describe(exc, user_code=True) == describe(exc)  # no caller's frame here: nothing left out
    # Count this test module as a caller (as persched's worker is): its frames go, the job's stay.
    monkeypatch.setattr(_tracebacks, "_CALLERS", (*_tracebacks._CALLERS, __file__))
    mine = describe(exc, user_code=True)
    assert __file__ not in mine
    assert mine.startswith(f'Traceback (most recent call last):\n  File "{failing_jobs.__file__}"')
    assert "The above exception was the direct cause" in mine
    # Only callers' frames (persched refused the run itself): kept whole.
    alone = caught(handled_then_raised)
    assert describe(alone, user_code=True) == describe(alone)
    assert __file__ in describe(alone)


def test_a_failure_without_a_handler_is_one_line_and_the_traceback_is_at_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.Logger("persched.probe")  # no parent: no handler on its way, as in an unconfigured app
    records: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        records.append(record)
        return True

    logger.addFilter(keep)  # a filter is not a handler
    exc = caught(raise_from)
    text = describe(exc, user_code=True)
    log_job_failure(logger, "settings", 3, exc, text)
    # logging.lastResort printed the ERROR record, one line; it drops DEBUG.
    assert capsys.readouterr().err == (
        "job settings generation 3 raised tests.support.failing_jobs.LookupFailed: no setting 'missing'"
        " (the traceback is in the run's error; configure logging to see it here)\n"
    )
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.ERROR, records[0].getMessage()),
        (logging.DEBUG, f"job settings generation 3 raised\n{text.rstrip()}"),
    ]


def test_a_failure_with_a_handler_is_logged_with_its_traceback() -> None:
    logger = logging.Logger("persched.probe")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    exc = caught(lambda: (_ for _ in ()).throw(SystemExit(3)))
    text = describe(exc, user_code=True)
    log_job_failure(logger, "settings", 3, exc, text)
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.ERROR, f"job settings generation 3 raised\n{text.rstrip()}")
    ]
    assert text.endswith("SystemExit: 3\n")
