"""The records the store hands out and takes in: plain values, no SQL.

The engine's workers, overrun watch, heartbeat and dispatcher
(`persched._engine`) import these, not the
statements: what a claim, a completion or a lost run is does not depend on
how it is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from .._model.instant import Instant, Micros, to_datetime

if TYPE_CHECKING:
    from datetime import datetime

    from .._model.models import Job, Run
    from .._model.policy import JobPlan, Retry, RunPolicy

__all__ = [
    "MAX_ERROR_TEXT",
    "Carried",
    "ChangeNote",
    "Claim",
    "ClaimEntry",
    "ClaimMiss",
    "Completion",
    "Correction",
    "OpenRun",
    "Overdue",
    "Recovery",
    "RunNowAnswer",
    "RunNowVerdict",
    "Stranded",
    "Upserted",
    "bound_error_text",
]


@dataclass(frozen=True)
class Carried:
    """What a claim decided, carried to its completion, which then neither reads nor decides again.

    The completion's UPDATE is conditional on where the claim left the row, so a row that
    anything changed meanwhile is read and decided anew.
    """

    plan: JobPlan
    next_run_at: Instant
    run_now_at: Instant | None
    pending: Retry | None = None  # an attempt pending on the row, which a run-now run leaves in place


@dataclass(frozen=True)
class Claim:
    """A won claim: everything a worker needs to run and complete it."""

    job_id: str
    generation: int
    target: str
    args_json: str
    kwargs_json: str
    scheduled_for: Instant
    started_at: Instant
    run_id: int
    run_now: bool = False
    max_runtime: Micros | None = None
    carried: Carried | None = field(default=None, compare=False, repr=False)  # for the completion
    attempt: int = 1  # which attempt of its slot (retries)
    runs_before: int | None = field(default=None, compare=False)  # the job's run count when claimed (retention)

    @property
    def run_policy(self) -> RunPolicy:
        """How this run executes and stops: its job's, as the claim read it (the default without a plan)."""
        from .._model.policy import DEFAULT_RUN_POLICY  # the policies' module: not for the read commands

        return DEFAULT_RUN_POLICY if self.carried is None else self.carried.plan.run_policy

    def run(self) -> Run:
        """The `Run` record as it stands while running."""
        from .._model.models import Run  # pydantic: not for the read commands, which import this module too

        return Run(
            job_id=self.job_id,
            generation=self.generation,
            scheduled_for=to_datetime(self.scheduled_for),
            started_at=to_datetime(self.started_at),
            run_id=self.run_id,
            run_now=self.run_now,
            attempt=self.attempt,
        )


class ChangeNote(NamedTuple):
    """A job changed by another process, as the heartbeat logs it."""

    job_id: str
    generation: int
    words: str


@dataclass(frozen=True)
class Completion:
    """A finished run waiting to be written: what `finish_runs` records."""

    claim: Claim
    outcome: str
    error: str | None
    finished_at: Instant


@dataclass(frozen=True)
class ClaimMiss:
    """A lost claim, with the row as it stands now (state None: no such job).

    `due_at`: when this entry should try again (None: not by this entry). `taken`: another claim
    has the slot, so only the job's owner queues it again; a due row SKIP LOCKED passed by is not
    taken (the lock may be anything's). Not compared: it follows from the row.
    """

    state: str | None
    generation: int | None = None
    owner: str | None = None
    due_at: Instant | None = None
    taken: bool = field(default=False, compare=False)


class Overdue(NamedTuple):
    """What `ClaimsStore.claim_overdue` (`persched._store.claims`) found: the entries it claimed and their results (as
    `claim_runs`), the rows due later by their jitter ``(due_at, job_id, generation)``, and the
    unreadable rows' ``(job_id, generation)``."""

    entries: list[ClaimEntry]
    results: list[Claim | ClaimMiss]
    later: list[tuple[Instant, str, int]]
    unreadable: list[tuple[str, int]]


@dataclass(frozen=True)
class Correction:
    """A row whose next slot lay further ahead than its schedule allows (written while a wall
    clock was ahead), moved back onto its grid, in its generation, by the start-up sweep (`DueStore.sweep`)."""

    job_id: str
    generation: int
    was: Instant  # the next slot the row had
    now: Instant  # the next slot it has now
    due: Instant | None  # when the heap should try it (None: paused)


@dataclass(frozen=True)
class OpenRun:
    """A run with no outcome yet, as lease recovery sees it."""

    run_id: int
    job_id: str
    generation: int
    instance_id: str
    lease_until: datetime | None


class Stranded(NamedTuple):
    """A job row that no scheduler would move on (`Store.stranded_jobs`), as it was seen: ``running``
    with no run of its job open, or a state that is not a job state."""

    job_id: str
    generation: int
    state: str
    owner: str | None
    lease_until: datetime | None
    running_for: datetime | None


# (job_id, generation, expected_at, taken_at): a heap entry the dispatcher took up at `taken_at`.
ClaimEntry = tuple[str, int, Instant, Instant]


class Upserted(NamedTuple):
    """What `Store.upsert_job` did: the job as stored, and when the heap should try it (None: paused or finished)."""

    job: Job
    change: Literal["created", "replaced", "unchanged"]
    due: Instant | None


class Recovery(NamedTuple):
    """What `Store.recover_run` did with a run whose lease had expired."""

    lost: bool  # False: nothing changed (the run was renewed, finished or recovered meanwhile)
    due: Instant | None = None  # when its job is due again, for the caller to queue (None: not by the caller)


class RunNowVerdict(str, Enum):
    """The answer to a run-now request (`Store.request_run_now`)."""

    REQUESTED = "requested"  # recorded: one extra run as soon as a worker is free
    PENDING = "pending"  # asked already, not started yet: nothing added
    DROPPED = "dropped"  # running, and its overlap policy is "skip"
    PAUSED = "paused"
    FINISHED = "finished"  # its window ended
    UNKNOWN = "unknown"  # no such job

    @property
    def will_run(self) -> bool:
        """True if an extra run is on its way (requested now or before)."""
        return self in (RunNowVerdict.REQUESTED, RunNowVerdict.PENDING)


class RunNowAnswer(NamedTuple):
    verdict: RunNowVerdict
    generation: int | None  # of the job asked (None: unknown)


MAX_ERROR_TEXT: Final = 8_000  # characters of error text kept per run


def bound_error_text(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    """Shorten `text` to at most `limit` characters, keeping its head and its tail.

    A traceback's last line names the exception type and message, the part
    an operator needs most, so the middle is cut rather than the end.
    """
    if len(text) <= limit:
        return text
    marker = "\n... [{} characters cut] ...\n"
    room = limit - len(marker.format(len(text)))
    head = room // 3
    tail = room - head
    return text[:head] + marker.format(len(text) - head - tail) + text[len(text) - tail :]
