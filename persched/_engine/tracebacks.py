"""Exceptions as text for persched's logs and run records, without source carets.

`traceback.format_exception` (and so `logger.exception` and `exc_info=`)
parses source lines with `ast` to place its carets, and on CPython 3.11
`ast.parse` running in two threads at once can fail with "AST constructor
recursion depth mismatch" (gh-106905), in whichever thread of the
application was parsing. persched formats exceptions on its own background
threads, so it formats them plainly and logs the text.

The text keeps the exception chain (``raise ... from``, and an exception
raised while handling another), oldest first, as the interpreter prints it.
For a failure that came out of a job's callable (``user_code=True``; the
worker knows whether it had called it) each traceback starts at the first
frame of the job's code: the frames that only called it — persched's worker,
and for a coroutine the asyncio and concurrent.futures frames that ran it on
a loop — come first in every traceback and say nothing about the failure,
so they are left out. A traceback with no other frame (the hand-over to an
application's loop that was not running) is kept whole, and so is a
failure before the call (a stored row that cannot be used, a module that
does not import).
"""

from __future__ import annotations

import os
import traceback
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import logging

__all__ = ["describe", "log_job_failure"]

_STDLIB: Final = os.path.dirname(os.__file__)
_PACKAGE: Final = os.path.dirname(os.path.dirname(__file__))  # persched/
# Where the frames that call a job live: persched's worker and its hand-over of a coroutine to an
# application's loop, and the standard library's machinery that runs a coroutine (asyncio's loop;
# concurrent.futures' Future.result in the hand-over). Not the rest of persched: a job of persched's
# own (the demo's) keeps its frames.
_CALLERS: Final = (
    os.path.join(_PACKAGE, "_engine", "workers.py"),
    os.path.join(_PACKAGE, "_engine", "child.py"),  # a job with executor="process", in its child
    os.path.join(_PACKAGE, "_interfaces", "async_front.py"),
    *(os.path.join(_STDLIB, name, "") for name in ("asyncio", "concurrent")),  # "asyncio/", never "asyncio_x/"
)
_CAUSE: Final = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT: Final = "\nDuring handling of the above exception, another exception occurred:\n\n"


def describe(exc: BaseException, *, user_code: bool = False) -> str:
    """Return the exception, its traceback and its chain as text, without source carets.

    Args:
        exc: The exception.
        user_code: `exc` came out of a job's callable: start each traceback at
            the callable's own frames (module docstring).
    """
    # The chain, newest first, each with the words that link it to the one before it.
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    link = ""
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    parts: list[str] = []
    for i, (item, _) in enumerate(reversed(chain)):
        if i:
            parts.append(chain[len(chain) - i][1])  # how the exception printed before led to this one
        parts.append(_one(item, user_code))
    return "".join(parts)


def _one(exc: BaseException, user_code: bool) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if user_code:
        first = next((i for i, frame in enumerate(frames) if not frame.filename.startswith(_CALLERS)), None)
        if first is not None:
            frames = traceback.StackSummary.from_list(frames[first:])
    lines = ["Traceback (most recent call last):\n"] if frames else []
    for frame in frames:
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n')
        if frame.line:
            lines.append(f"    {frame.line.strip()}\n")
    lines.extend(traceback.format_exception_only(exc))
    return "".join(lines)


def log_job_failure(logger: logging.Logger, job_id: str, generation: int, exc: BaseException, text: str) -> None:
    """Log a job's failure `exc` (`text`: from `describe`) at ERROR, with its traceback once logging is configured.

    With no handler anywhere on the logger's way to the root (an
    application that never configured logging), the record would reach
    stderr through `logging.lastResort`, a whole traceback per failure: then
    the ERROR record is one line (the exception's last line, and where the
    traceback is) and the traceback goes to a DEBUG record, which a handler
    configured later sees, and which the run's error keeps anyway.
    """
    if logger.hasHandlers():
        logger.error("job %s generation %d raised\n%s", job_id, generation, text.rstrip())
        return
    kind = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        kind = f"{type(exc).__module__}.{kind}"  # as the interpreter names it on a traceback's last line
    message = " ".join(str(exc).split())
    logger.error(
        "job %s generation %d raised %s (the traceback is in the run's error; configure logging to see it here)",
        job_id,
        generation,
        f"{kind}: {message}" if message else kind,
    )
    logger.debug("job %s generation %d raised\n%s", job_id, generation, text.rstrip())
