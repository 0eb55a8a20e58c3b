"""`RetryPolicy` and `JobPlan.retry_after`: when the next attempt of a slot is due, pure
(docs/reference/behaviour.md, "Retries")."""

from __future__ import annotations

from typing import Final

import pytest

from persched._model.instant import Instant, Micros
from persched._model.models import validate_policies
from persched._model.policy import JobPlan, Retry, RetryPolicy

SLOT: Final = Instant(1_700_000_123_456_789)  # an odd instant
MINUTE: Final = 60_000_000


def _plan(**options: object) -> JobPlan:
    return JobPlan.of("j", 1, SLOT, validate_policies(60.0, **options))


def test_each_delay_is_the_one_before_times_the_backoff_rounded_once() -> None:
    policy = RetryPolicy(retries=4, delay=Micros(100_000), backoff=1.5)
    assert [policy.delay_before(k) for k in range(1, 7)] == [None, 100_000, 150_000, 225_000, 337_500, None]


def test_the_cap_and_a_backoff_too_large_for_a_float() -> None:
    capped = RetryPolicy(retries=5, delay=Micros(10_000_000), backoff=10.0, max_delay=Micros(15_000_000))
    assert [capped.delay_before(k) for k in range(2, 5)] == [10_000_000, 15_000_000, 15_000_000]
    huge = RetryPolicy(retries=100, delay=Micros(1), backoff=1e308)
    assert huge.delay_before(2) == 1
    assert huge.delay_before(3) is None  # 1e308 µs: past any slot
    assert huge.delay_before(101) is None  # the float power overflows: no attempt, no error
    assert RetryPolicy(retries=100, delay=Micros(1), backoff=1e308, max_delay=Micros(5)).delay_before(101) == 5


@pytest.mark.parametrize(
    ("outcome", "run_now", "lost", "retried"),
    [
        ("error", False, False, True),
        ("lost", False, False, False),
        ("lost", False, True, True),
        ("stopped", False, True, False),
        ("ok", False, True, False),
        ("error", True, True, False),
    ],
)
def test_what_is_retried(outcome: str, run_now: bool, lost: bool, retried: bool) -> None:
    assert RetryPolicy(retries=1, lost=lost).retried(outcome, run_now) is retried
    assert RetryPolicy(retries=0, lost=lost).retried(outcome, run_now) is False


def test_an_attempt_comes_before_the_next_slot_or_not_at_all() -> None:
    plan = _plan(retries=3, retry_delay_seconds=20.0, retry_backoff=2.0)
    ended = Instant(SLOT + 1)
    assert plan.retry_after(SLOT, 1, "error", False, ended) == (Instant(ended + 20_000_000), Retry(2, SLOT))
    assert plan.retry_after(SLOT, 2, "error", False, ended) == (Instant(ended + 40_000_000), Retry(3, SLOT))
    # attempt 4 would be due 80 s after attempt 3 ended: past the next slot (60 s after SLOT)
    assert plan.retry_after(SLOT, 3, "error", False, ended) is None
    # exactly at the next slot is too late as well
    at_slot = _plan(retries=1, retry_delay_seconds=59.999999)
    assert at_slot.retry_after(SLOT, 1, "error", False, ended) is None
    assert at_slot.retry_after(SLOT, 1, "error", False, SLOT) == (Instant(SLOT + MINUTE - 1), Retry(2, SLOT))
    assert plan.retry_deadline(Retry(2, SLOT), Instant(ended + 20_000_000)) == SLOT + MINUTE


def test_a_fixed_delay_job_retries_before_one_interval_after_the_attempt_ended() -> None:
    plan = _plan(recurrence="fixed_delay", retries=2, retry_delay_seconds=59.0)
    ended = Instant(SLOT + 5 * MINUTE)  # a long run: only its end counts
    due, retry = plan.retry_after(SLOT, 1, "error", False, ended) or (None, None)
    assert (due, retry) == (Instant(ended + 59_000_000), Retry(2, SLOT))
    assert retry is not None
    assert plan.retry_deadline(retry, Instant(ended + 59_000_000)) == ended + MINUTE
