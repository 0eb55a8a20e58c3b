"""Words for what the command line and the dashboard show: instants, durations, job states, run outcomes.

Pure (`now` is passed in); they take a plain row (`PlainJob`, `PlainRun`) or a public model alike.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Final

from .._model.instant import micros, seconds
from .._model.models import JobState
from .._model.triggers import describe_duration

if TYPE_CHECKING:
    from typing import TypeAlias

    from .._model.models import Job, Run
    from .._model.plain_models import PlainJob, PlainRun
    from .._store.health import Problem

    AnyJob: TypeAlias = Job | PlainJob
    AnyRun: TypeAlias = Run | PlainRun

__all__ = [
    "COUNTS_NOTE",
    "RANGE",
    "human_duration",
    "iso",
    "job_state",
    "missed_slots",
    "pending_attempt",
    "plural",
    "problem_words",
    "relative",
    "retry_policy",
    "run_attempt",
    "run_counts",
    "run_outcome",
]

RANGE: Final = "\u2013"  # EN DASH between the first and last slot of a "missed" record


def iso(at: datetime | None) -> str:
    """Format an aware datetime as ISO-8601 UTC to the second ("2027-01-15T08:00:00Z"); "-" for None."""
    if at is None:
        return "-"
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock_time(at: datetime) -> str:
    """The UTC time of day: "08:11:00", or "08:11:00.250" off the whole second."""
    at = at.astimezone(timezone.utc)
    return at.strftime("%H:%M:%S") + (f".{at.microsecond // 1000:03d}" if at.microsecond else "")


def human_duration(seconds: float) -> str:
    """Format a non-negative span to a useful precision: "0.4ms", "250ms", "1.2s", "45s", "3m 12s", "1d 3h"."""
    micros = round(seconds * 1_000_000)  # whole microseconds, then integer arithmetic only
    if micros < 10_000:
        return _tenths(micros // 100, "ms")  # 0.4ms, 7.5ms: fast jobs still read as different
    if micros < 1_000_000:
        return f"{micros // 1000}ms"
    if micros < 10_000_000:
        return _tenths(micros // 100_000, "s")  # 1.2s, not 1s
    whole = micros // 1_000_000
    parts = [(whole // 86_400, "d"), (whole % 86_400 // 3_600, "h"), (whole % 3_600 // 60, "m"), (whole % 60, "s")]
    while parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts[:2] if n or unit == parts[0][1])


def _tenths(tenths: int, unit: str) -> str:
    whole, tenth = divmod(tenths, 10)
    return f"{whole}{unit}" if tenth == 0 else f"{whole}.{tenth}{unit}"


def plural(count: int, word: str, words: str | None = None) -> str:
    """Say "1 run", "3 runs", "0 errors"."""
    return f"{count} {word if count == 1 else words or word + 's'}"


def relative(at: datetime, now: datetime) -> str:
    """Say when `at` is seen from `now`: "in 3m 12s", "3s ago", "now"."""
    delta = (at - now).total_seconds()
    if abs(delta) < 0.001:
        return "now"
    return f"in {human_duration(delta)}" if delta > 0 else f"{human_duration(-delta)} ago"


COUNTS_NOTE: Final = "runs of the current definition (generation); replacing a job starts them again"


def run_counts(job: AnyJob) -> str:
    """Say a job's counts and whose they are: "4 (1 error) of generation 2, the current definition; last outcome ok".

    `run_count` and `error_count` count the runs of the current generation only (a replacement
    starts them at 0); the older generations' runs are in the history.
    """
    counts = f"{job.run_count} ({plural(job.error_count, 'error')})"
    return f"{counts} of generation {job.generation}, the current definition; last outcome {job.last_outcome or '-'}"


def job_state(job: AnyJob) -> str:
    """Say where a job stands: "scheduled", "paused", "running, paused", "finished", "..., run-now pending"."""
    if job.unreadable is not None:
        return "unreadable"  # shown on its own line; `persched show` says why
    words = [job.state.value]
    if job.paused and job.state != JobState.PAUSED:
        words.append("paused")  # its last run is still finishing (JobState)
    if job.run_now_requested:
        words.append("run-now pending")
    return ", ".join(words)


def retry_policy(job: AnyJob) -> str | None:
    """A job's retry options in words: "3 (first after 10 s, each delay x2, at most 5 min; lost runs too)".

    None without retries: the other retry options then change nothing.
    """
    if job.retries == 0:
        return None
    cap = job.retry_max_delay_seconds
    first = job.retry_delay_seconds if cap is None else min(job.retry_delay_seconds, cap)
    if job.retries == 1:
        delays = f"after {_span(first)}"
    elif job.retry_backoff == 1 or (cap is not None and cap <= first):
        delays = f"each after {_span(first)}"  # every delay is the same
    else:
        delays = f"first after {_span(first)}, each delay x{job.retry_backoff:g}"
        delays += "" if cap is None else f", at most {_span(cap)}"
    lost = "; lost runs too" if job.retry_lost else ""
    return f"{job.retries} ({delays}{lost})"


def _span(value: float) -> str:
    return describe_duration(micros(value))


def pending_attempt(job: AnyJob) -> str | None:
    """The retry a job's next run is, if one is pending: "attempt 2 of 4 for the slot 2027-01-15T08:00:00Z"."""
    if job.pending_attempt is None:
        return None
    return f"attempt {job.pending_attempt} of {job.retries + 1} for the slot {iso(job.pending_attempt_slot)}"


def run_attempt(run: AnyRun) -> str:
    """The TRY cell: the attempt of its slot ("1", "2"); "-" for a record of missed slots, never an attempt."""
    return "-" if run.outcome == "missed" else str(run.attempt)


def missed_slots(run: AnyRun) -> str:
    """Say what a "missed" record stands for: "missed 12 slots", then its first and last slot joined by RANGE."""
    count = run.missed_count
    slots = "every slot" if count is None else "1 slot" if count == 1 else f"{count} slots"
    first, last = run.scheduled_for, run.missed_until
    if last is None or last == first:
        span = _clock_time(first)
    elif first.astimezone(timezone.utc).date() == last.astimezone(timezone.utc).date():
        span = f"{_clock_time(first)}{RANGE}{_clock_time(last)}"  # the date is in SCHEDULED FOR
    else:
        span = f"{iso(first)}{RANGE}{iso(last)}"
    return f"missed {slots} {span}"


def run_outcome(run: AnyRun) -> str:
    """The OUTCOME cell: "ok", "running", "error, overran", "ok, run-now", "missed 3 slots ..."."""
    words = [missed_slots(run) if run.outcome == "missed" else run.outcome or "running"]
    if run.overran:
        words.append("overran")
    if run.run_now:
        words.append("run-now")
    return ", ".join(words)


def problem_words(problem: Problem) -> str:
    """One line for a problem of `persched._store.health`, saying what is wrong and what to look at."""
    where = f"namespace {problem.namespace!r}"
    if problem.kind == "no_scheduler":
        renewed = "" if problem.at is None else f"; the last one seen renewed its lease at {iso(problem.at)}"
        waits = "job waits" if problem.count == 1 else "jobs wait"
        return f"{where}: no live scheduler, and {problem.count} {waits} to run{renewed}"
    if problem.kind == "overdue":
        assert problem.late is not None
        assert problem.allowed is not None
        return (
            f"{where}: job {problem.job_id!r} is overdue: its run due at {iso(problem.at)} has not started"
            f" ({human_duration(seconds(problem.late))} late, more than its grace plus the lease,"
            f" {human_duration(seconds(problem.allowed))})"
        )
    return (
        f"{where}: job {problem.job_id!r} is failing: its last {plural(problem.count, 'run')} all failed,"
        f" the latest started at {iso(problem.at)} (`persched runs {problem.job_id}` shows why)"
    )
