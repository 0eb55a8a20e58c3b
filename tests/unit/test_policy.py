"""`persched._policy.JobPlan`: the decisions of SPEC-policies, pure (no store, no clock)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

import pytest

from persched._models import validate_policies
from persched._policy import ClaimPlan, JobPlan, Missed, place_grid

T = 1_800_000_000.0


def _aware(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


def plan(interval: float | None = 10.0, anchor: float = T, **policies: Any) -> JobPlan:  # noqa: ANN401 - schedule() keywords
    return JobPlan.of("job", 1, anchor, validate_policies(interval, **policies))


# --- first slot --------------------------------------------------------------------------


@pytest.mark.parametrize("start_in", [0.0, None, 2.5])
def test_a_new_grid_starts_where_asked_also_between_microseconds(start_in: float | None) -> None:
    """Real clocks read between microseconds; the first slot must not slip to the next one."""
    rng = random.Random(7)
    hourly = validate_policies(3600.0)
    for _ in range(2000):
        now = T + rng.random()
        anchor, first = place_grid(hourly, now, start_in)
        expected = now + (3600.0 if start_in is None else start_in)
        assert anchor == first
        assert abs(first - expected) <= 5e-7


def test_a_past_start_at_anchors_the_grid_and_the_first_slot_is_the_next_one() -> None:
    from_t, from_t50 = validate_policies(3600.0, start_at=_aware(T)), validate_policies(3600.0, start_at=_aware(T + 50))
    assert place_grid(from_t, T + 1000.0, None) == (T, T + 3600.0)
    assert place_grid(from_t, T + 3600.0, None) == (T, T + 3600.0)  # exactly on a slot: that slot
    assert place_grid(from_t50, T, None) == (T + 50.0, T + 50.0)  # a future start_at is the first slot


def test_a_cron_grid_starts_at_its_first_slot_not_before_now_or_start_at() -> None:
    hourly = validate_policies(None, cron="0 * * * *")
    assert place_grid(hourly, T + 1.0, None)[1] == T + 3600.0
    assert place_grid(hourly, T, None)[1] == T  # T is on the hour
    assert place_grid(validate_policies(None, cron="0 * * * *", start_at=_aware(T + 7200)), T, None)[1] == T + 7200.0


# --- claim -----------------------------------------------------------------------------------


def test_coalesce_runs_the_latest_slot_and_records_nothing() -> None:
    assert plan().claim(T + 10, None, T + 10, T + 45.5) == ClaimPlan(T + 40, False, T + 50, None)


def test_skip_runs_an_on_time_slot_and_records_the_earlier_ones() -> None:
    decision = plan(misfire="skip", grace_seconds=1.0).claim(T + 10, None, T + 10, T + 40.5)
    assert decision == ClaimPlan(T + 40, False, T + 50, Missed(T + 10, T + 30, 3))


def test_skip_drops_a_late_slot_and_runs_nothing() -> None:
    decision = plan(misfire="skip", grace_seconds=1.0).claim(T + 10, None, T + 10, T + 41.5)
    assert decision == ClaimPlan(None, False, T + 50, Missed(T + 10, T + 40, 4))


def test_catch_up_runs_the_n_most_recent_oldest_first_and_drops_the_rest() -> None:
    p = plan(misfire="catch_up", max_catch_up=3)
    first = p.claim(T + 10, None, T + 10, T + 100.5)  # slots 10 .. 100: ten of them
    assert first == ClaimPlan(T + 80, False, T + 90, Missed(T + 10, T + 70, 7))
    assert p.claim(T + 90, None, T + 90, T + 100.6) == ClaimPlan(T + 90, False, T + 100, None)
    assert p.claim(T + 100, None, T + 100, T + 100.7) == ClaimPlan(T + 100, False, T + 110, None)


def test_a_run_now_request_runs_off_the_grid_without_moving_it() -> None:
    assert plan().claim(T + 100, T + 42.0, T + 42.0, T + 42.1) == ClaimPlan(T + 42.0, True, T + 100, None)


def test_the_grid_goes_first_when_both_are_due() -> None:
    assert plan().claim(T + 40, T + 41.0, T + 41.0, T + 41.0) == ClaimPlan(T + 40, False, T + 50, None)


def test_fixed_delay_runs_its_slot_and_leaves_the_next_one_to_the_completion() -> None:
    p = plan(recurrence="fixed_delay")
    assert p.claim(T + 10, None, T + 10, T + 10.2) == ClaimPlan(T + 10, False, T + 10, None)
    assert p.after_run(T + 10, T + 25.0) == (T + 35.0, None)


def test_the_window_end_caps_the_slot_and_finishes_the_job() -> None:
    p = plan(end_at=_aware(T + 35))
    decision = p.claim(T + 10, None, T + 10, T + 100.0)
    assert decision == ClaimPlan(T + 30, False, T + 40, None)
    assert p.is_over(decision.next_run_at)


# --- completion ----------------------------------------------------------------------------


def test_overlap_forbid_leaves_passed_slots_due_for_the_claim() -> None:
    assert plan().after_run(T + 20, T + 47.0) == (T + 20, None)


def test_overlap_skip_drops_the_slots_that_passed_while_running() -> None:
    assert plan(overlap="skip").after_run(T + 20, T + 47.0) == (T + 50, Missed(T + 20, T + 40, 3))
    assert plan(overlap="skip").after_run(T + 20, T + 15.0) == (T + 20, None)  # none passed


# --- jitter --------------------------------------------------------------------------------


def test_jitter_moves_the_due_time_not_the_slot() -> None:
    p = plan(jitter_seconds=5.0)
    offsets = [p.due_at(T + 10 * k, None) - (T + 10 * k) for k in range(500)]
    assert all(0 <= o < 5.0 for o in offsets)
    assert len({round(o, 3) for o in offsets}) > 400  # spread, not one constant
    assert p.due_at(T + 10, T + 3.0) == T + 3.0  # a pending run-now is not jittered


def test_resume_continues_from_now_and_counts_a_slot_exactly_at_now() -> None:
    p = plan()
    assert p.resumed(T + 35.0) == T + 40
    assert p.resumed(T + 40.0) == T + 40  # not passed yet: it runs
    assert plan(recurrence="fixed_delay").resumed(T + 35.0) == T + 45.0
