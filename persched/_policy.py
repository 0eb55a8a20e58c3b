"""What a job's policies decide at each step of its life (SPEC-policies), pure.

The store calls these inside its transactions, on the row it holds locked, so
every decision is made once, by the instance whose commit wins, from the row
as it stands. Nothing here touches the database, a clock or a lock.

A job's `next_run_at` always names the next slot still to run: a claim of a
grid slot moves it on at once (to the slot after the one now running), a
run-now run leaves it where it is, and a completion moves it only where a
policy says so (fixed delay; overlap "skip"). So slots that passed while a
run was in flight are simply due when it finishes, and the claim then
applies the job's missed-run policy to them, as to any other late slots.

A slot is late when its run starts more than `grace_seconds` after the slot
plus its jitter offset (jitter delays a run on purpose, so it does not count
against the grace).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _triggers

if TYPE_CHECKING:
    from ._models import Policies

__all__ = ["ClaimPlan", "JobPlan", "Missed", "place_grid"]


def place_grid(policies: Policies, now: float, start_in: float | None) -> tuple[float, float]:
    """Return ``(anchor, next_run_at)`` of a new job's grid: the anchor of an
    interval grid (SPEC §2 default: one interval from now; `start_at` if
    given) and its first slot not before `now`."""
    start_at, interval = policies.start_at, policies.interval_seconds
    if interval is not None:
        if start_at is None:
            # A new grid starts at its anchor (rounded to the store's microseconds,
            # which may put it a hair before `now`: it is due at once either way).
            anchor = round(now + (interval if start_in is None else start_in), 6)
            return anchor, anchor
        if start_at >= now:
            return start_at, start_at
        if policies.recurrence == "fixed_delay":  # from a past start: at once
            return start_at, round(now, 6)
        # An interval grid anchored at a past start_at: its first slot from now on.
        grid = _triggers.interval_trigger(start_at, interval)
        latest = grid.latest_at_or_before(now)
        return start_at, latest if latest is not None and latest >= now else grid.next_after(now)
    assert policies.cron is not None
    floor = now if start_at is None else max(now, start_at)
    first = _triggers.cron_trigger(policies.cron, policies.timezone).next_after(round(floor - 1e-6, 6))
    return first, first  # a slot exactly at `floor` counts


@dataclass(frozen=True)
class Missed:
    """Slots `first` .. `last` that will never run (`count` None: too many to count)."""

    first: float
    last: float
    count: int | None


@dataclass(frozen=True)
class ClaimPlan:
    """What a won claim does: run `run_for` (None: nothing runs) and move the row on."""

    run_for: float | None
    run_now: bool
    next_run_at: float
    missed: Missed | None


@dataclass(frozen=True)
class JobPlan:
    """One job's policies, with its trigger built (None for fixed delay: no grid)."""

    job_id: str
    generation: int
    trigger: _triggers.Trigger | None
    interval: float | None
    misfire: str
    max_catch_up: int | None
    grace: float
    overlap: str
    jitter: float
    end_at: float | None

    @classmethod
    def of(cls, job_id: str, generation: int, anchor: float, policies: Policies) -> JobPlan:
        """Build the plan of a job whose grid is anchored at `anchor` (its first slot)."""
        trigger: _triggers.Trigger | None
        if policies.cron is not None:
            trigger = _triggers.cron_trigger(policies.cron, policies.timezone)
        elif policies.recurrence == "fixed_delay":
            trigger = None
        else:
            assert policies.interval_seconds is not None
            trigger = _triggers.interval_trigger(anchor, policies.interval_seconds)
        return cls(
            job_id,
            generation,
            trigger,
            policies.interval_seconds,
            policies.misfire,
            policies.max_catch_up,
            policies.grace_seconds,
            policies.overlap,
            policies.jitter_seconds,
            policies.end_at,
        )

    # -- placing slots -----------------------------------------------------------

    def is_over(self, next_run_at: float, run_now_at: float | None = None) -> bool:
        """True when the job has finished: its next slot lies past the window,
        and no run-now request is still to run."""
        return self.end_at is not None and next_run_at > self.end_at and run_now_at is None

    def jitter_for(self, slot: float) -> float:
        """The offset of `slot`'s run, the same in every instance (SPEC-policies: jitter)."""
        return _triggers.jitter_offset(self.job_id, self.generation, slot, self.jitter) if self.jitter else 0.0

    def due_at(self, next_run_at: float, run_now_at: float | None) -> float:
        """When the heap should try the job: its next slot plus jitter, or a pending run-now."""
        due = next_run_at + self.jitter_for(next_run_at)
        return due if run_now_at is None else min(due, run_now_at)

    def slot_after(self, slot: float) -> float:
        """The slot after `slot` (fixed delay: one interval later, as a guess)."""
        if self.trigger is None:
            assert self.interval is not None
            return round(slot + self.interval, 6)
        return self.trigger.next_after(slot)

    def resumed(self, now: float) -> float:
        """The first slot from a resume at `now` on: slots that passed while paused are
        not run, one falling exactly at `now` is (as for a new grid)."""
        if self.trigger is None:
            return self.slot_after(now)  # fixed delay: one interval from the resume
        return self.trigger.next_after(round(now - 1e-6, 6))

    # -- claim and completion ------------------------------------------------------

    def claim(self, next_run_at: float, run_now_at: float | None, bound: float, now: float) -> ClaimPlan:
        """Decide a won claim: `bound` is the latest slot the heap entry may run
        (it never runs a slot early), `now` the claim's time."""
        if next_run_at > bound:
            # Not the grid's turn: the entry is a run-now request.
            assert run_now_at is not None
            return ClaimPlan(run_now_at, True, next_run_at, None)
        if self.trigger is None:
            return self._claim_fixed_delay(next_run_at, now)
        latest = self.trigger.latest_at_or_before(now if self.end_at is None else min(now, self.end_at))
        latest = next_run_at if latest is None else max(latest, next_run_at)
        on_time = now - latest - self.jitter_for(latest) <= self.grace
        if self.misfire == "coalesce":
            # SPEC §2: one run stands for every slot since next_run_at.
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

    def _claim_fixed_delay(self, next_run_at: float, now: float) -> ClaimPlan:
        assert self.interval is not None
        late = now - next_run_at - self.jitter_for(next_run_at) > self.grace
        if self.misfire == "skip" and late:
            return ClaimPlan(None, False, round(now + self.interval, 6), Missed(next_run_at, next_run_at, 1))
        # The next slot is set when this run finishes (one interval after its end).
        return ClaimPlan(next_run_at, False, next_run_at, None)

    def after_run(self, next_run_at: float, finished_at: float) -> tuple[float, Missed | None]:
        """The row's next slot once a run finished at `finished_at`, and the slots it drops."""
        if self.trigger is None:
            assert self.interval is not None
            return round(finished_at + self.interval, 6), None  # fixed delay: from the run's end
        if self.overlap == "skip" and next_run_at <= finished_at:
            # Slots that passed while the run was in flight are dropped.
            last = self.trigger.latest_at_or_before(finished_at)
            last = next_run_at if last is None else max(last, next_run_at)
            return self.trigger.next_after(finished_at), self._missed(next_run_at, last)
        return next_run_at, None

    def _missed(self, first: float, last: float) -> Missed:
        assert self.trigger is not None
        return Missed(first, last, self.trigger.count_between(first, last))

    def _missed_before(self, first: float, slot: float) -> Missed | None:
        """The slots from `first` up to, not including, `slot` (None if there are none)."""
        assert self.trigger is not None
        if first >= slot:
            return None
        before = self.trigger.recent_slots(first, round(slot - 1e-6, 6), 1)
        return self._missed(first, before[-1]) if before else None
