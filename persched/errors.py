"""The public exception hierarchy: everything persched raises on purpose."""

from __future__ import annotations


class PerschedError(Exception):
    """Base class of every error persched raises on purpose."""


class InvalidJobError(PerschedError, ValueError):
    """An argument of a public call is not acceptable; nothing was written.

    Attributes:
        argument: The name of the offending argument.
        reason: What is wrong and how to fix it.
    """

    def __init__(self, argument: str, reason: str) -> None:
        self.argument = argument
        self.reason = reason
        super().__init__(f"{argument}: {reason}")


class SchedulerStateError(PerschedError, RuntimeError):
    """The scheduler is not in a state that allows the call."""


class SchemaVersionError(PerschedError):
    """The database's schema is newer than (or unknown to) this code.

    Attributes:
        found: The revision recorded in the database.
        expected: The newest revision this code knows.
    """

    def __init__(self, found: str, expected: str) -> None:
        self.found = found
        self.expected = expected
        super().__init__(
            f"the database is at schema revision {found!r}, which this version of "
            f"persched does not know (its newest is {expected!r}); upgrade persched "
            "or use a database made by this version"
        )


class StoreError(PerschedError):
    """The database cannot be used.

    Attributes:
        url: The database URL, password masked.
        reason: What went wrong.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")
