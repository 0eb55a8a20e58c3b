"""The public exception hierarchy: everything persched raises on purpose."""

from __future__ import annotations

import functools


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


class JobNotFoundError(PerschedError, LookupError):
    """No job of that id in the namespace: never scheduled there, or descheduled.

    A `LookupError`, not a `KeyError`, whose ``str()`` would print the message quoted, with escapes.

    Attributes:
        job_id: The id asked for.
        namespace: The namespace it was looked for in.
        owner: Another namespace that holds an active job of that id, else None.
        descheduled: True if the job was in `namespace` and was descheduled.

    The message ends with what to do: `remedy`, or persched's own words.
    """

    def __init__(
        self,
        job_id: str,
        namespace: str,
        *,
        owner: str | None = None,
        descheduled: bool = False,
        remedy: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.namespace = namespace
        self.owner = owner
        self.descheduled = descheduled
        self._remedy = remedy
        message = f"no job {job_id!r} in namespace {namespace!r}"
        if owner is not None:
            message += f": it is a job of namespace {owner!r}"
            remedy = remedy or f"a scheduler sees only its own namespace's jobs (namespace={owner!r})"
        elif descheduled:
            message += ": it was descheduled"
            remedy = remedy or "schedule() it again to use it"
        else:
            remedy = remedy or "jobs() lists the namespace's jobs"
        super().__init__(f"{message}; {remedy}")

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled with its fields (a process pool, a task queue): the default would call __init__(message).
        made = functools.partial(JobNotFoundError, owner=self.owner, descheduled=self.descheduled, remedy=self._remedy)
        return (made, (self.job_id, self.namespace))


class RunStopped(PerschedError):
    """A stop was asked of the running job (docs/reference/behaviour.md, "Stopping a run").

    `RunContext.raise_if_stopping()` raises it; a run that ends with it is
    recorded with outcome ``"stopped"`` and the reason.

    Attributes:
        reason: Why the run was asked to stop: ``"max_runtime"``, ``"cancel"`` or ``"shutdown"``.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the run was asked to stop ({reason})")

    def __reduce__(self) -> tuple[object, ...]:
        return (RunStopped, (self.reason,))
