"""Exceptions as text for persched's logs and run records, without source carets.

`traceback.format_exception` (and so `logger.exception` and `exc_info=`)
parses source lines with `ast` to place its carets, and on CPython 3.11
`ast.parse` running in two threads at once can fail with "AST constructor
recursion depth mismatch" (gh-106905), in whichever thread of the
application was parsing. persched formats exceptions on its own background
threads, so it formats them plainly and logs the text.
"""

from __future__ import annotations

import traceback

__all__ = ["describe"]


def describe(exc: BaseException) -> str:
    """Return the exception and its traceback as text, without source carets."""
    lines = ["Traceback (most recent call last):\n"]
    for frame in traceback.extract_tb(exc.__traceback__):
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n')
        if frame.line:
            lines.append(f"    {frame.line.strip()}\n")
    lines.extend(traceback.format_exception_only(exc))
    return "".join(lines)
