"""Exceptions as text for persched's logs and run records, without source carets.

On CPython 3.11, `traceback.format_exception` (and so ``logger.exception``) calls
`ast.parse` to place its carets, and two threads parsing at once can fail with
"AST constructor recursion depth mismatch" (gh-106905) in whichever thread of the
application was parsing. persched's background threads therefore format plainly.
The chain is kept, oldest first. For a failure out of a job's callable
(``user_code=True``) each traceback starts at the job's first frame: the worker's,
asyncio's and concurrent.futures' frames before it say nothing about the failure.
A traceback with no frame of the job's is kept whole.
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
    """Return the exception, its traceback and its chain as text; `user_code`: start at the job's frames."""
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
    """Log a job's failure at ERROR, with its traceback `text` once logging is configured.

    Without any handler, `logging.lastResort` would print a whole traceback per
    failure to stderr: the ERROR record is then one line, and the traceback goes
    to a DEBUG record (the run's error keeps it anyway).
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
