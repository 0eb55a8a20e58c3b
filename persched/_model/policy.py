"""What a job's policies decide at each step of its life, pure: the store calls it on the row it holds locked.

The invariant (a row's `next_run_at` is the next slot still to run), lateness and excluded dates:
docs/explanation/interfaces.md, "What a job's policies decide".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast

from . import triggers as _triggers
from .exclusions import ExcludingSlots, Exclusions, exclusions_of
from .instant import Instant, Micros

if TYPE_CHECKING:
    from .models import Policies

__all__ = ["ClaimPlan", "JobPlan", "Missed", "PlanShape", "Retry", "RetryPolicy", "RunPolicy", "place_grid"]


def place_grid(policies: Policies, now: Instant, start_in: Micros | None) -> tuple[Instant, Instant]:
    """Return ``(anchor, next_run_at)`` of a new job: its first slot not before `now`, nor on an excluded date."""
    kind = _triggers.kind_of(policies)
    anchor, first = kind.place(policies, now, start_in)
    if policies.exclude is None:
        return anchor, first
    exclusions = exclusions_of(policies.exclude, policies.timezone)
    grid = kind.of(policies, anchor)
    if grid is None:  # fixed delay
        return anchor, exclusions.first_allowed(first)
    return anchor, ExcludingSlots(grid, exclusions).next_after(Instant(first - 1))


@dataclass(frozen=True)
class Missed:
    """Slots `first` .. `last` that will never run (`count` None: too many to count)."""

    first: Instant
    last: Instant
    count: int | None


DEFAULT_STOP_GRACE: Final = Micros(5_000_000)  # stop_grace_seconds=5.0
DEFAULT_RETRY_DELAY: Final = Micros(10_000_000)  # retry_delay_seconds=10.0
DEFAULT_RETRY_BACKOFF: Final = 2.0
_LONGEST_DELAY: Final = 10 * 366 * 86_400_000_000  # µs: the longest interval a job may have


@dataclass(frozen=True)
class RunPolicy:
    """How a job's runs execute and stop (docs/reference/behaviour.md, "Stopping a run")."""

    executor: str = "thread"  # "process": each run in a child process
    on_overrun: str = "warn"  # "stop": a run past max_runtime_seconds is asked to stop
    stop_grace: Micros = DEFAULT_STOP_GRACE  # a stopped child process is killed this long after SIGTERM

    @classmethod
    def of(cls, policies: Policies) -> RunPolicy:
        """Return the run policy of `policies` (the shared default when they ask for nothing else)."""
        made = cls(policies.executor, policies.on_overrun, policies.stop_grace)
        return DEFAULT_RUN_POLICY if made == DEFAULT_RUN_POLICY else made


DEFAULT_RUN_POLICY = RunPolicy()


@dataclass(frozen=True)
class RetryPolicy:
    """How a job's failed runs are tried again within their slot (docs/reference/behaviour.md, "Retries")."""

    retries: int = 0  # attempts past the first
    delay: Micros = DEFAULT_RETRY_DELAY  # before attempt 2, after attempt 1 ended
    backoff: float = DEFAULT_RETRY_BACKOFF  # each later delay is the one before times this
    max_delay: Micros | None = None
    lost: bool = False  # a run recorded "lost" is tried again too

    @classmethod
    def of(cls, policies: Policies) -> RetryPolicy:
        """Return the retry policy of `policies` (the shared default when they ask for none)."""
        if not policies.retries:
            return NO_RETRIES
        p = policies
        return cls(p.retries, p.retry_delay, p.retry_backoff, p.retry_max_delay, p.retry_lost)

    def delay_before(self, attempt: int) -> Micros | None:
        """Return the wait before `attempt` (2, 3, ...): delay * backoff**(attempt - 2), capped.

        None past the retries, or past ten years, where no slot reaches.
        """
        if not 2 <= attempt <= self.retries + 1:
            return None
        try:
            delay = self.delay * self.backoff ** (attempt - 2)
        except OverflowError:  # a backoff too large for a float: longer than any cap or slot
            delay = math.inf
        if self.max_delay is not None:
            delay = min(delay, self.max_delay)
        return Micros(round(delay)) if delay <= _LONGEST_DELAY else None  # beyond: no slot is that long

    def retried(self, outcome: str, run_now: bool) -> bool:
        """Return whether a run of `outcome` is tried again (a run-now run never is)."""
        return not run_now and self.retries > 0 and (outcome == "error" or (outcome == "lost" and self.lost))


NO_RETRIES = RetryPolicy()


@dataclass(frozen=True)
class Retry:
    """A pending attempt: `attempt` (2, 3, ...) of the slot `slot`, due at the row's next_run_at."""

    attempt: int
    slot: Instant


@dataclass(frozen=True)
class ClaimPlan:
    """What a won claim does: run `run_for` (None: nothing runs) and move the row on."""

    run_for: Instant | None
    run_now: bool
    next_run_at: Instant
    missed: Missed | None


@dataclass(frozen=True)
class JobPlan:
    """One job's policies, with its trigger built (None for fixed delay: no grid)."""

    job_id: str
    generation: int
    trigger: _triggers.Slots | None  # without the excluded dates
    interval: Micros | None
    misfire: str
    max_catch_up: int | None
    grace: Micros
    overlap: str
    jitter: Micros
    end_at: Instant | None
    start_at: Instant | None = None  # only where a decision needs it: corrections
    exclusions: Exclusions | None = None
    pause_after_failures: int | None = None  # the store pauses the job when its failure streak reaches it
    run_policy: RunPolicy = DEFAULT_RUN_POLICY
    retry_policy: RetryPolicy = NO_RETRIES

    @classmethod
    def of(cls, job_id: str, generation: int, anchor: Instant, policies: Policies) -> JobPlan:
        """Build the plan of a job whose grid is anchored at `anchor` (its first slot)."""
        return PlanShape.of(policies).plan(job_id, generation, anchor, policies.interval)

    def describe(self) -> str:
        """Return the schedule in words: "every 5 min", "cron 0 3 * * * Europe/Paris", "once at ..."."""
        if self.trigger is not None:
            return self.trigger.describe()
        return f"every {_triggers.describe_duration(self.interval or 0)} after each run ends"

    def is_over(self, next_run_at: Instant, run_now_at: Instant | None = None) -> bool:
        """Return whether the job finished: its next slot lies past the window and no run-now is pending."""
        return self.end_at is not None and next_run_at > self.end_at and run_now_at is None

    def jitter_for(self, slot: Instant) -> Micros:
        """Return the offset of `slot`'s run, the same in every instance (docs/how-to/schedules.md, "Jitter")."""
        return _triggers.jitter_offset(self.job_id, self.generation, slot, self.jitter) if self.jitter else Micros(0)

    def due_at(
        self, next_run_at: Instant, run_now_at: Instant | None, reach: _triggers.JitterReach, *, retry: bool = False
    ) -> Instant:
        """Return when the heap should try the job: its next slot plus jitter, or a pending run-now.

        The jitter is counted in `reach`. With `retry`, the row waits for an attempt due at `next_run_at`
        exactly: jitter spreads slots, not retries.
        """
        if self.jitter:
            reach.widen(self.jitter)
        due = next_run_at if retry else Instant(next_run_at + self.jitter_for(next_run_at))
        return due if run_now_at is None else min(due, run_now_at)

    def allowed(self, t: Instant) -> Instant:
        """Return `t`, or the first instant after the excluded dates it falls on (a fixed-delay due time)."""
        return t if self.exclusions is None else self.exclusions.first_allowed(t)

    def slot_after(self, slot: Instant) -> Instant:
        """Return the slot after `slot` (fixed delay: one interval later, as a guess)."""
        if self.trigger is None:
            assert self.interval is not None
            return self.allowed(Instant(slot + self.interval))
        return self.trigger.next_after(slot)

    def resumed(self, now: Instant, next_run_at: Instant) -> Instant:
        """Return the first slot of a resume at `now`: one at `now` runs, earlier ones do not.

        Never before `next_run_at`: a clock behind the one that ran the last slot must not put the job
        back on it (docs/reference/behaviour.md, "Clock corrections across a restart").
        """
        if self.trigger is None:
            return max(self.slot_after(now), next_run_at)  # fixed delay: one interval from the resume
        return max(self.trigger.next_after(Instant(now - 1)), next_run_at)

    def coming(self, first: Instant, count: int) -> list[Instant]:
        """Return up to `count` slots from `first` on, within the window (fixed delay: only `first`)."""
        slots: list[Instant] = []
        slot = first
        while len(slots) < count and not self.is_over(slot):
            slots.append(slot)
            if self.trigger is None:
                break
            slot = self.trigger.next_after(slot)
            if slot >= _triggers.NEVER:
                break
        return slots

    def corrected(self, next_run_at: Instant, now: Instant) -> Instant | None:
        """Return the slot to write instead of `next_run_at` if a clock that was ahead wrote it, else None.

        The earliest allowed is the first slot after `now`, not before `start_at`. An interval job steps
        back by whole intervals, keeping its phase even before the anchor (the same clock placed it); a
        cron job goes to its first fire there. A slot pushed ahead by an excluded span is not corrected.
        """
        earliest = Instant(now + 1 if self.start_at is None else max(now + 1, self.start_at))
        if self.trigger is None and self.interval is not None:
            # Fixed delay: a run ending now puts it one interval on, past any excluded dates.
            if next_run_at <= self.allowed(Instant(earliest - 1 + self.interval)):
                return None
            return self.allowed(Instant(next_run_at - (next_run_at - earliest) // self.interval * self.interval))
        if self.interval is not None:
            steps = max(next_run_at - earliest, 0) // self.interval
            if steps == 0:
                return None
            back = Instant(next_run_at - steps * self.interval)
            # The same phase past excluded dates (the grid's next_after may stop at its anchor).
            while self.exclusions is not None and (span := self.exclusions.span_of(back)) is not None:
                back = Instant(back + -(-(self.exclusions.ends[span] - back) // self.interval) * self.interval)
            return back if back < next_run_at else None
        assert self.trigger is not None
        allowed = self.trigger.next_after(Instant(earliest - 1))
        return allowed if next_run_at > allowed else None

    def claim(
        self, next_run_at: Instant, run_now_at: Instant | None, bound: Instant, now: Instant, taken_at: Instant
    ) -> ClaimPlan:
        """Decide a won claim.

        Args:
            next_run_at: The row's next slot still to run.
            run_now_at: The row's pending run-now request, or None.
            bound: The latest slot the heap entry may run: no slot runs early.
            now: The claim's time.
            taken_at: When the dispatcher took the entry up. Lateness is measured there, so dispatch
                latency does not count against `grace_seconds`.
        """
        if next_run_at > bound:
            # Not the grid's turn: the entry is a run-now request.
            assert run_now_at is not None
            return ClaimPlan(run_now_at, True, next_run_at, None)
        taken = min(taken_at, now)
        if self.trigger is None:
            return self._claim_fixed_delay(next_run_at, now, taken)
        latest = self.trigger.latest_at_or_before(now if self.end_at is None else min(now, self.end_at))
        latest = next_run_at if latest is None else max(latest, next_run_at)
        # A slot that came due after the entry was taken up waited for this claim: its lateness counts from now.
        on_time = (now if latest > taken else taken) - latest - self.jitter_for(latest) <= self.grace
        if self.misfire == "coalesce":
            # One run stands for every slot since next_run_at.
            return ClaimPlan(latest, False, self.trigger.next_after(latest), None)
        if self.misfire == "skip":
            after = self.trigger.next_after(latest)
            if on_time:
                return ClaimPlan(latest, False, after, self._missed_before(next_run_at, latest))
            return ClaimPlan(None, False, after, self._missed(next_run_at, latest))
        # catch_up: the max_catch_up most recent slots run, oldest first, one per claim.
        assert self.max_catch_up is not None
        pending = self.trigger.count_between(next_run_at, latest)
        if pending is not None and pending <= self.max_catch_up:
            run_for = next_run_at  # nothing to drop (the common case once caught up): no list of slots
        else:
            recent = self.trigger.recent_slots(next_run_at, latest, self.max_catch_up)
            run_for = recent[0] if recent else latest
        return ClaimPlan(run_for, False, self.trigger.next_after(run_for), self._missed_before(next_run_at, run_for))

    def _claim_fixed_delay(self, next_run_at: Instant, now: Instant, taken: Instant) -> ClaimPlan:
        late = taken - next_run_at - self.jitter_for(next_run_at) > self.grace
        if self.misfire == "skip" and late:
            return ClaimPlan(None, False, self.slot_after(now), Missed(next_run_at, next_run_at, 1))
        # The next slot is set when this run finishes (one interval after its end).
        return ClaimPlan(next_run_at, False, next_run_at, None)

    def after_run(self, next_run_at: Instant, finished_at: Instant) -> tuple[Instant, Missed | None]:
        """Return the row's next slot once a run finished at `finished_at`, and the slots it drops."""
        if self.trigger is None:
            return self.slot_after(finished_at), None  # fixed delay: from the run's end
        if self.overlap == "skip" and next_run_at <= finished_at:
            # Slots that passed while the run was in flight are dropped.
            last = self.trigger.latest_at_or_before(finished_at)
            last = next_run_at if last is None else max(last, next_run_at)
            return self.trigger.next_after(finished_at), self._missed(next_run_at, last)
        return next_run_at, None

    def after_loss(self, next_run_at: Instant, slot: Instant, recovered_at: Instant) -> Instant:
        """Return the row's next slot once `slot`'s run was recovered as lost: never `slot` again.

        Also on a clock behind the one that claimed it (docs/reference/behaviour.md, "Restart and crashes").
        """
        if self.trigger is None:
            return max(self.slot_after(recovered_at), self.slot_after(slot))  # fixed delay: from the loss
        return next_run_at if next_run_at > slot else self.trigger.next_after(slot)

    # Retries: docs/reference/behaviour.md, "Retries".

    def retry_before(self, slot: Instant, ended_at: Instant) -> Instant:
        """Return the next regular slot after an attempt of `slot` ended: a retry is due before it or never."""
        return self.slot_after(ended_at if self.trigger is None else slot)  # fixed delay: from the attempt's end

    def retry_after(
        self, slot: Instant, attempt: int, outcome: str, run_now: bool, ended_at: Instant
    ) -> tuple[Instant, Retry] | None:
        """Return when the attempt after `attempt` is due, and that attempt; None if there is none.

        None also when it would come at or after the job's next regular slot.
        """
        if not self.retry_policy.retried(outcome, run_now):
            return None
        delay = self.retry_policy.delay_before(attempt + 1)
        if delay is None:
            return None
        due = self.allowed(Instant(ended_at + delay))  # an excluded date has no runs: not even attempts
        return (due, Retry(attempt + 1, slot)) if due < self.retry_before(slot, ended_at) else None

    def retry_deadline(self, retry: Retry, due: Instant) -> Instant:
        """Return the next regular slot of a pending `retry` due at `due`: it starts only before then."""
        if self.trigger is None:
            delay = self.retry_policy.delay_before(retry.attempt)
            # Fixed delay: one interval after the failed attempt ended, which was `delay` before `due`.
            return self.slot_after(Instant(due - (delay or 0)))
        return self.trigger.next_after(retry.slot)

    def _missed(self, first: Instant, last: Instant) -> Missed:
        assert self.trigger is not None
        return Missed(first, last, self.trigger.count_between(first, last))

    def _missed_before(self, first: Instant, slot: Instant) -> Missed | None:
        """Return the slots from `first` up to, not including, `slot`, or None."""
        assert self.trigger is not None
        if first >= slot:
            return None
        before = self.trigger.recent_slots(first, Instant(slot - 1), 1)
        return self._missed(first, before[-1]) if before else None


class _WithInterval:
    """`policies` with another interval, as a kind of trigger reads them (`_triggers.TriggerSpec`)."""

    __slots__ = ("_policies", "interval")

    def __init__(self, policies: Policies, interval: Micros | None) -> None:
        self._policies = policies
        self.interval = interval

    def __getattr__(self, attr: str) -> object:
        return getattr(self._policies, attr)


@dataclass(frozen=True)
class PlanShape:
    """What the plans of jobs whose policies differ at most in their interval share, built once."""

    policies: Policies  # its interval stands in for any: `plan` takes the job's own
    kind: type[_triggers.Trigger]
    exclusions: Exclusions | None
    run_policy: RunPolicy
    retry_policy: RetryPolicy

    @classmethod
    def of(cls, policies: Policies) -> PlanShape:
        exclusions = None if policies.exclude is None else exclusions_of(policies.exclude, policies.timezone)
        return cls(policies, _triggers.kind_of(policies), exclusions, RunPolicy.of(policies), RetryPolicy.of(policies))

    def plan(self, job_id: str, generation: int, anchor: Instant, interval: Micros | None) -> JobPlan:
        """Return the plan of a job of this shape on `interval`, anchored at `anchor` (its first slot)."""
        p = self.policies
        spec = p if interval == p.interval else cast("_triggers.TriggerSpec", _WithInterval(p, interval))
        trigger: _triggers.Slots | None = self.kind.of(spec, anchor)
        if trigger is not None and self.exclusions is not None:
            trigger = ExcludingSlots(trigger, self.exclusions)
        return JobPlan(
            job_id,
            generation,
            trigger,
            interval,
            p.misfire,
            p.max_catch_up,
            p.grace,
            p.overlap,
            p.jitter,
            p.end_at,
            p.start_at,
            self.exclusions,
            p.pause_after_failures,
            self.run_policy,
            self.retry_policy,
        )
