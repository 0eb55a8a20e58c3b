"""A claimed row's plan: the policies jobs share (its shape, read and checked once), and its own interval.

100,000 jobs on intervals of their own share one set of policies but their
interval. A claim keeps what they share (`persched._model.policy.PlanShape`)
and builds each row's plan from its own job id, generation, anchor and
interval, checked each time: a plan kept per job would not be found again
before it was pushed out. Checked here: every job of one shape runs on its
own interval, on every engine; the shapes kept do not grow with the jobs; and
the interval checked apart from the rest refuses what the whole check refuses.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

from persched._model.instant import Instant, Micros, micros
from persched._model.models import Policies, check_stored, stored_interval, validate_definition, validate_policies
from persched._model.policy import JobPlan, PlanShape
from persched._store import Claim, claim_batch
from persched.errors import InvalidJobError
from tests.support.helpers import EPOCH

if TYPE_CHECKING:
    from persched._store import Store

T = Instant(micros(EPOCH + 0.1234567))  # an odd instant: whole microseconds, no round grid
JOBS = 40
S = 1_000_000


def test_jobs_of_one_shape_each_run_on_their_own_interval(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_batch, "_RAW_SHAPES", {})
    intervals = [30.0 + i * 1.237 for i in range(JOBS)]
    for i, interval in enumerate(intervals):
        policies = validate_policies(interval, grace_seconds=7.5, overlap="skip")
        store.upsert_job(validate_definition(f"j{i}", "tests.support.jobs:record", policies, (), {}, 0.0), T)
    firsts = {f"j{i}": Instant(T + micros(interval)) for i, interval in enumerate(intervals)}
    now = Instant(max(firsts.values()) + 1)
    entries = [(job_id, 1, first, now) for job_id, first in firsts.items()]
    claims = [r for r in store.claim_runs(entries, now, "me", Micros(300 * S)) if isinstance(r, Claim)]
    assert sorted(claim.job_id for claim in claims) == sorted(firsts)
    for claim in claims:
        assert claim.carried is not None
        plan = claim.carried.plan
        assert plan.interval == micros(intervals[int(claim.job_id[1:])])
        assert plan.job_id == claim.job_id
        assert plan.grace == Micros(7_500_000)
        # the slot after the one claimed is one interval of its own on
        assert claim.carried.next_run_at == claim.scheduled_for + plan.interval
    assert len(claim_batch._RAW_SHAPES) == 1  # one shape, read once, for every job of it


INTERVALS = [60.0, 61.234567, 1e-6, 4e-7, 0.0, -5.0, 1e305, -1e305, math.inf, math.nan, 316_224_000.0, 316_224_000.5]


@pytest.mark.parametrize("value", INTERVALS)
def test_the_interval_alone_is_refused_as_the_whole_check_refuses_it(value: float) -> None:
    columns = {**validate_policies(60.0).columns(), "interval_seconds": value}
    policies = Policies.from_columns(columns.__getitem__)
    try:
        check_stored(policies)
    except InvalidJobError:
        with pytest.raises(InvalidJobError):
            stored_interval(value)
    else:
        assert stored_interval(value) == policies.interval


@pytest.mark.parametrize(
    "options",
    [
        {"misfire": "catch_up", "max_catch_up": 3},
        {"recurrence": "fixed_delay", "exclude": ["2030-01-02"]},
        {"exclude": ["2030-01-02/2030-01-04"], "jitter_seconds": 2.5, "retries": 2},
    ],
)
def test_a_plan_from_a_shape_has_the_slots_of_its_own_policies(options: dict[str, object]) -> None:
    shape = PlanShape.of(validate_policies(1.0, **options))  # built for another interval
    for interval in (61.234567, 3600.0, 86_400.5):
        own = validate_policies(interval, **options)
        plan = shape.plan("job", 3, T, own.interval)
        expected = JobPlan.of("job", 3, T, own)
        assert plan == expected
        assert plan.coming(T, 5) == expected.coming(T, 5)
        assert plan.slot_after(Instant(T + 10 * S)) == expected.slot_after(Instant(T + 10 * S))
