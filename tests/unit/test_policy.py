"""`persched._model.policy.JobPlan`: the decisions of docs/how-to/schedules.md, pure (no store, no clock).

Instants and durations are whole microseconds (`persched._model.instant`): the worked examples give them as
``at(seconds)`` (T plus that many seconds, exact), the properties draw them at any microsecond.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persched._model.instant import US_PER_SECOND, Instant, Micros, micros, to_datetime
from persched._model.models import Policies, validate_policies
from persched._model.policy import ClaimPlan, JobPlan, Missed, place_grid
from persched._model.triggers import JitterReach, cron_trigger, interval_trigger

S: Final = US_PER_SECOND
DAY: Final = 86_400 * S
TEN_YEARS: Final = 10 * 366 * DAY  # MAX_INTERVAL_SECONDS
T: Final = Instant(1_800_000_000 * S)  # 2027-01-15T08:00:00Z, on the hour (tests.support.helpers.EPOCH)
ODD: Final = Instant(1_700_000_000_123_457)  # an instant on an odd microsecond

PROPERTY = settings(max_examples=200, deadline=None, database=None)


def at(seconds: float) -> Instant:
    """T plus `seconds`, rounded once to the microsecond."""
    return Instant(T + micros(seconds))


def plan(interval: float | None = 10.0, anchor: int = T, **policies: Any) -> JobPlan:  # noqa: ANN401 - schedule() keywords
    return JobPlan.of("job", 1, Instant(anchor), validate_policies(interval, **policies))


def grid_plan(anchor: int, interval: int, **policies: Any) -> JobPlan:  # noqa: ANN401 - Policies fields
    """A plan on an interval of any number of microseconds (schedule() takes float seconds)."""
    return JobPlan.of("job", 1, Instant(anchor), Policies(interval=Micros(interval), **policies))


anchors = st.one_of(
    st.integers(ODD - 10**12, ODD + 10**12),
    st.integers(T - 10**12, T + 10**12),
    st.integers(0, 2 * T),
).map(Instant)
intervals = st.one_of(
    st.integers(1, TEN_YEARS),
    st.integers(1, 1000),
    st.sampled_from([1, 7, 1000, 333_333, S, 10 * S, 3600 * S, DAY]),
).map(Micros)
CRONS = [("0 * * * *", "UTC"), ("30 2 * * *", "Europe/Paris"), ("*/15 * * * *", "America/New_York")]


def slot_index(interval: int, data: st.DataObject, label: str = "k") -> int:
    """A slot number: near the anchor, or anywhere within twenty years of it."""
    return data.draw(st.one_of(st.integers(0, 5), st.integers(0, 2 * TEN_YEARS // interval)), label=label)


# --- first slot --------------------------------------------------------------------------


@pytest.mark.parametrize("start_in", [0, None, 2_500_000])
def test_a_new_grid_starts_exactly_where_asked_at_an_odd_microsecond(start_in: int | None) -> None:
    """Was "also between microseconds": a clock reading is now a whole microsecond, so the first slot
    is exactly ``now + start_in`` (``now + interval`` by default), never the microsecond after."""
    hourly = validate_policies(3600.0)
    for now in (ODD, Instant(ODD + 1), Instant(T + 999_999)):
        anchor, first = place_grid(hourly, now, None if start_in is None else Micros(start_in))
        assert anchor == first
        assert first == now + (3600 * S if start_in is None else start_in)


@PROPERTY
@given(anchors, intervals, st.one_of(st.none(), st.just(0), st.integers(0, TEN_YEARS)))
def test_a_new_grid_starts_at_now_plus_start_in_or_one_interval(
    now: Instant, interval: Micros, start_in: int | None
) -> None:
    anchor, first = place_grid(Policies(interval=interval), now, None if start_in is None else Micros(start_in))
    assert anchor == first
    assert first == now + (interval if start_in is None else start_in)
    if start_in == 0:
        assert first == now  # due at once


def test_a_past_start_at_anchors_the_grid_and_the_first_slot_is_the_next_one() -> None:
    from_t = validate_policies(3600.0, start_at=to_datetime(T))
    from_t50 = validate_policies(3600.0, start_at=to_datetime(at(50)))
    assert place_grid(from_t, at(1000), None) == (T, at(3600))
    assert place_grid(from_t, at(3600), None) == (T, at(3600))  # exactly on a slot: that slot
    assert place_grid(from_t, Instant(at(3600) + 1), None) == (T, at(7200))  # one microsecond past it: the next
    assert place_grid(from_t50, T, None) == (at(50), at(50))  # a future start_at is the first slot
    assert place_grid(validate_policies(3600.0, start_at=to_datetime(T), recurrence="fixed_delay"), at(1000), None) == (
        T,
        at(1000),  # fixed delay from a past start: at once
    )


@PROPERTY
@given(anchors, intervals, st.data())
def test_a_past_start_at_places_the_first_slot_on_its_grid_at_or_after_now(
    start_at: Instant, interval: Micros, data: st.DataObject
) -> None:
    now = Instant(start_at + data.draw(st.one_of(st.integers(1, 3 * interval), st.integers(1, 2 * TEN_YEARS))))
    policies = validate_policies(1.0, start_at=to_datetime(start_at))  # a datetime holds the µs exactly
    assert policies.start_at == start_at
    anchor, first = place_grid(Policies(interval=interval, start_at=policies.start_at), now, None)
    assert anchor == start_at
    assert first >= now
    assert (first - start_at) % interval == 0  # on the grid of start_at
    assert first - interval < now  # the first grid slot not before now
    future = Instant(now + data.draw(st.integers(0, TEN_YEARS)))
    assert place_grid(Policies(interval=interval, start_at=future), now, None) == (future, future)


def test_a_cron_grid_starts_at_its_first_slot_not_before_now_or_start_at() -> None:
    hourly = validate_policies(None, cron="0 * * * *")
    assert place_grid(hourly, at(1), None)[1] == at(3600)
    assert place_grid(hourly, Instant(T + 1), None)[1] == at(3600)  # one microsecond past the hour
    assert place_grid(hourly, T, None)[1] == T  # T is on the hour
    assert place_grid(hourly, Instant(T - 1), None)[1] == T
    assert place_grid(validate_policies(None, cron="0 * * * *", start_at=to_datetime(at(7200))), T, None)[1] == at(7200)


# --- claim -----------------------------------------------------------------------------------


def test_coalesce_runs_the_latest_slot_and_records_nothing() -> None:
    assert plan().claim(at(10), None, at(10), at(45.5), at(45.5)) == ClaimPlan(at(40), False, at(50), None)


def test_skip_runs_an_on_time_slot_and_records_the_earlier_ones() -> None:
    decision = plan(misfire="skip", grace_seconds=1.0).claim(at(10), None, at(10), at(40.5), at(40.5))
    assert decision == ClaimPlan(at(40), False, at(50), Missed(at(10), at(30), 3))
    exactly_the_grace = plan(misfire="skip", grace_seconds=1.0).claim(at(10), None, at(10), at(41), at(41))
    assert exactly_the_grace.run_for == at(40)


def test_skip_drops_a_late_slot_and_runs_nothing() -> None:
    decision = plan(misfire="skip", grace_seconds=1.0).claim(at(10), None, at(10), at(41.5), at(41.5))
    assert decision == ClaimPlan(None, False, at(50), Missed(at(10), at(40), 4))
    one_microsecond_late = plan(misfire="skip", grace_seconds=1.0).claim(
        at(10), None, at(10), Instant(at(41) + 1), Instant(at(41) + 1)
    )
    assert one_microsecond_late.run_for is None


def test_skip_measures_lateness_when_the_slot_was_taken_up() -> None:
    """The scheduler's own dispatch latency for a slot taken up on time is not late."""
    p = plan(misfire="skip", grace_seconds=0.0)
    assert p.claim(at(40), None, at(40), at(40), at(40)) == ClaimPlan(at(40), False, at(50), None)
    assert p.claim(at(40), None, at(40), at(42), at(40)) == ClaimPlan(at(40), False, at(50), None)
    assert p.claim(at(40), None, at(40), at(42), Instant(at(40) + 1)) == ClaimPlan(
        None, False, at(50), Missed(at(40), at(40), 1)
    )
    assert p.claim(at(40), None, at(40), at(40), at(42)) == p.claim(at(40), None, at(40), at(40), at(40))  # min()


def test_catch_up_runs_the_n_most_recent_oldest_first_and_drops_the_rest() -> None:
    p = plan(misfire="catch_up", max_catch_up=3)
    first = p.claim(at(10), None, at(10), at(100.5), at(100.5))  # slots 10 .. 100: ten of them
    assert first == ClaimPlan(at(80), False, at(90), Missed(at(10), at(70), 7))
    assert p.claim(at(90), None, at(90), at(100.6), at(100.6)) == ClaimPlan(at(90), False, at(100), None)
    assert p.claim(at(100), None, at(100), at(100.7), at(100.7)) == ClaimPlan(at(100), False, at(110), None)


def test_a_run_now_request_runs_off_the_grid_without_moving_it() -> None:
    assert plan().claim(at(100), at(42), at(42), at(42.1), at(42)) == ClaimPlan(at(42), True, at(100), None)


def test_the_grid_goes_first_when_both_are_due() -> None:
    assert plan().claim(at(40), at(41), at(41), at(41), at(41)) == ClaimPlan(at(40), False, at(50), None)


def test_fixed_delay_runs_its_slot_and_leaves_the_next_one_to_the_completion() -> None:
    p = plan(recurrence="fixed_delay")
    assert p.claim(at(10), None, at(10), at(10.2), at(10.2)) == ClaimPlan(at(10), False, at(10), None)
    assert p.after_run(at(10), at(25)) == (at(35), None)
    late = plan(recurrence="fixed_delay", misfire="skip", grace_seconds=1.0)
    assert late.claim(at(10), None, at(10), at(12), at(12)) == ClaimPlan(None, False, at(22), Missed(at(10), at(10), 1))
    assert late.claim(at(10), None, at(10), at(12), at(10)).run_for == at(10)  # taken up on time


def test_the_window_end_caps_the_slot_and_finishes_the_job() -> None:
    p = plan(end_at=to_datetime(at(35)))
    decision = p.claim(at(10), None, at(10), at(100), at(100))
    assert decision == ClaimPlan(at(30), False, at(40), None)
    assert p.is_over(decision.next_run_at)
    assert not p.is_over(at(30))
    assert not p.is_over(decision.next_run_at, run_now_at=at(100))  # a pending run-now still runs


@PROPERTY
@given(anchors, intervals, st.data())
def test_skip_with_no_grace_runs_a_slot_claimed_exactly_on_it(
    anchor: Instant, interval: Micros, data: st.DataObject
) -> None:
    k = slot_index(interval, data)
    slot = Instant(anchor + k * interval)
    p = grid_plan(anchor, interval, misfire="skip", grace=Micros(0))
    assert p.claim(slot, None, slot, slot, slot) == ClaimPlan(slot, False, Instant(slot + interval), None)
    behind = data.draw(st.integers(1, min(k, 100)), label="slots behind") if k else 0
    if behind:  # earlier slots still pending: the on-time one runs, they are recorded as missed
        first = Instant(slot - behind * interval)
        assert p.claim(first, None, first, slot, slot) == ClaimPlan(
            slot, False, Instant(slot + interval), Missed(first, Instant(slot - interval), behind)
        )


@st.composite
def on_time_and_late(draw: st.DrawFn) -> tuple[JobPlan, Instant, Micros, Micros, Micros]:
    """A skip plan whose grace and jitter fit well inside one interval, one of its slots, its jitter offset."""
    anchor = draw(anchors)
    interval = draw(st.one_of(st.integers(8, 1000), st.integers(8, TEN_YEARS)).map(Micros))
    grace = Micros(draw(st.one_of(st.just(0), st.integers(0, interval // 4))))
    jitter = Micros(draw(st.one_of(st.just(0), st.integers(0, interval // 4))))
    slot = Instant(anchor + draw(st.integers(0, max(5, 2 * TEN_YEARS // interval))) * interval)
    p = grid_plan(anchor, interval, misfire="skip", grace=grace, jitter=jitter)
    return p, slot, interval, grace, p.jitter_for(slot)


@PROPERTY
@given(on_time_and_late(), st.data())
def test_skip_runs_a_slot_taken_up_on_time_even_if_committed_later(
    case: tuple[JobPlan, Instant, Micros, Micros, Micros], data: st.DataObject
) -> None:
    p, slot, interval, grace, offset = case
    taken_at = Instant(slot + offset + data.draw(st.integers(0, grace), label="lateness"))  # within the grace
    now = Instant(data.draw(st.integers(taken_at, slot + interval - 1), label="now"))  # the claim commits later
    assert p.claim(slot, None, slot, now, taken_at) == ClaimPlan(slot, False, Instant(slot + interval), None)


@PROPERTY
@given(on_time_and_late(), st.data())
def test_skip_drops_a_slot_taken_up_late(
    case: tuple[JobPlan, Instant, Micros, Micros, Micros], data: st.DataObject
) -> None:
    p, slot, interval, grace, offset = case
    taken_at = Instant(slot + offset + grace + data.draw(st.integers(1, interval // 4), label="past the grace"))
    now = Instant(data.draw(st.integers(taken_at, slot + interval - 1), label="now"))
    assert p.claim(slot, None, slot, now, taken_at) == ClaimPlan(
        None, False, Instant(slot + interval), Missed(slot, slot, 1)
    )


@PROPERTY
@given(anchors, intervals, st.data())
def test_coalesce_runs_the_latest_slot_at_or_before_now(anchor: Instant, interval: Micros, data: st.DataObject) -> None:
    k = slot_index(interval, data)
    next_run_at = Instant(anchor + k * interval)
    now = Instant(next_run_at + data.draw(st.one_of(st.integers(0, 3 * interval), st.integers(0, TEN_YEARS))))
    taken_at = Instant(data.draw(st.integers(next_run_at, now + DAY), label="taken_at"))
    decision = grid_plan(anchor, interval).claim(next_run_at, None, next_run_at, now, taken_at)
    assert decision.run_for is not None  # coalesce never drops a slot for being late
    assert next_run_at <= decision.run_for <= now < decision.run_for + interval
    assert (decision.run_for - anchor) % interval == 0
    assert decision == ClaimPlan(decision.run_for, False, Instant(decision.run_for + interval), None)


@PROPERTY
@given(anchors, intervals, st.integers(1, 8), st.integers(0, 40), st.data())
def test_catch_up_runs_exactly_the_n_most_recent_slots_oldest_first(
    anchor: Instant, interval: Micros, n: int, pending: int, data: st.DataObject
) -> None:
    """Claim after claim at one `now`, until the row is past it: against the enumerated backlog."""
    first = Instant(anchor + slot_index(interval, data) * interval)
    now = Instant(first + pending * interval + data.draw(st.integers(0, interval - 1), label="now - last slot"))
    backlog = [Instant(first + j * interval) for j in range(pending + 1)]  # the slots first .. now
    p = grid_plan(anchor, interval, misfire="catch_up", max_catch_up=n)
    runs, missed, next_run_at = [], 0, first
    while next_run_at <= now:
        decision = p.claim(next_run_at, None, next_run_at, now, now)
        assert decision.run_for is not None
        runs.append(decision.run_for)
        missed += 0 if decision.missed is None else (decision.missed.count or 0)
        next_run_at = decision.next_run_at
    assert runs == backlog[-n:]
    assert missed == len(backlog) - len(runs)
    assert next_run_at == backlog[-1] + interval


# --- completion ----------------------------------------------------------------------------


def test_overlap_forbid_leaves_passed_slots_due_for_the_claim() -> None:
    assert plan().after_run(at(20), at(47)) == (at(20), None)


def test_overlap_skip_drops_the_slots_that_passed_while_running() -> None:
    assert plan(overlap="skip").after_run(at(20), at(47)) == (at(50), Missed(at(20), at(40), 3))
    assert plan(overlap="skip").after_run(at(20), at(40)) == (at(50), Missed(at(20), at(40), 3))  # 40 passed too
    assert plan(overlap="skip").after_run(at(20), at(15)) == (at(20), None)  # none passed


# --- jitter --------------------------------------------------------------------------------


def test_jitter_moves_the_due_time_not_the_slot() -> None:
    p = plan(jitter_seconds=5.0)
    reach = JitterReach()
    assert plan().due_at(at(10), None, reach) == at(10)  # no jitter: the slot itself
    assert reach() == 0
    offsets = [p.due_at(at(10 * k), None, reach) - at(10 * k) for k in range(500)]
    assert all(0 <= o < 5 * S for o in offsets)
    assert len(set(offsets)) > 400  # spread, not one constant
    assert p.due_at(at(10), at(3), reach) == at(3)  # a pending run-now is not jittered
    assert reach() == 5 * S  # the largest jitter of the due times handed out


# --- resume, clock corrections, lost runs ----------------------------------------------------


def test_resume_continues_from_now_and_counts_a_slot_exactly_at_now() -> None:
    p = plan()
    assert p.resumed(at(35), at(10)) == at(40)
    assert p.resumed(at(40), at(10)) == at(40)  # not passed yet: it runs
    assert p.resumed(Instant(at(40) + 1), at(10)) == at(50)
    assert p.resumed(at(35), at(60)) == at(60)  # a clock behind: never before next_run_at
    assert plan(recurrence="fixed_delay").resumed(at(35), at(10)) == at(45)
    assert plan(recurrence="fixed_delay").resumed(at(35), at(60)) == at(60)


@PROPERTY
@given(anchors, intervals, st.data())
def test_resume_is_never_before_next_run_at(anchor: Instant, interval: Micros, data: st.DataObject) -> None:
    next_run_at = Instant(anchor + slot_index(interval, data) * interval)
    now = Instant(next_run_at + data.draw(st.integers(-2 * interval - DAY, 2 * interval + DAY), label="now - next"))
    first = grid_plan(anchor, interval).resumed(now, next_run_at)
    assert first >= next_run_at
    assert (first - anchor) % interval == 0
    if now <= next_run_at:
        assert first == next_run_at  # a clock behind (or a slot not passed yet): the row's slot
    else:
        assert now <= first < now + interval  # the first slot from now on
    delay = grid_plan(anchor, interval, recurrence="fixed_delay")
    assert delay.resumed(now, next_run_at) == max(now + interval, next_run_at)


@PROPERTY
@given(st.sampled_from(CRONS), st.integers(T - 400 * DAY, T + 400 * DAY), st.integers(-3 * DAY, 3 * DAY))
def test_a_cron_resume_is_never_before_next_run_at(cron: tuple[str, str], t: int, behind: int) -> None:
    trigger = cron_trigger(*cron)
    next_run_at = trigger.next_after(Instant(t))
    now = Instant(next_run_at + behind)
    first = JobPlan.of("job", 1, T, Policies(cron=cron[0], timezone=cron[1])).resumed(now, next_run_at)
    assert first == max(next_run_at, trigger.next_after(Instant(now - 1)))
    assert first >= next_run_at
    assert first >= now


def test_a_row_from_a_clock_ahead_is_corrected_to_one_interval() -> None:
    p = plan()
    assert p.corrected(at(40), at(35)) is None
    assert p.corrected(at(40), at(30)) is None  # exactly one interval ahead
    assert p.corrected(at(50), Instant(at(40) - 1)) == at(40)
    assert p.corrected(at(3600), at(35)) == at(40)
    delay = plan(recurrence="fixed_delay")
    assert delay.corrected(at(45), at(35)) is None
    assert delay.corrected(at(3605), at(35)) == at(45)  # whole intervals back: its phase is kept
    assert delay.corrected(Instant(at(3600) + 1), at(35)) == Instant(at(40) + 1)
    cron = plan(None, cron="0 * * * *")
    assert cron.corrected(at(3600), at(35)) is None  # the next fire after now
    assert cron.corrected(at(7200), at(35)) == at(3600)
    assert cron.corrected(at(7200), at(3600)) is None  # a fire exactly at now is not "after now"


@pytest.mark.parametrize(
    ("interval", "policies"),
    [(10.0, {}), (10.0, {"recurrence": "fixed_delay"}), (None, {"cron": "0 * * * *"})],
)
def test_a_future_start_at_is_not_a_clock_error(interval: float | None, policies: dict[str, Any]) -> None:
    """docs/how-to/schedules.md, "Window": no run before start_at. A row waiting for a start_at a day ahead is
    where the user put it, not where a clock that ran ahead put it (docs/reference/behaviour.md,
    "Clock corrections across a restart")."""
    start_at = at(86_400)
    p = plan(interval, anchor=start_at, start_at=to_datetime(start_at), **policies)
    first = place_grid(validate_policies(interval, start_at=to_datetime(start_at), **policies), T, None)[1]
    assert first == start_at
    assert p.corrected(first, T) is None


@PROPERTY
@given(anchors, intervals, st.data())
def test_corrected_only_moves_a_slot_more_than_one_interval_ahead(
    anchor: Instant, interval: Micros, data: st.DataObject
) -> None:
    now = Instant(anchor + data.draw(st.integers(0, 2 * TEN_YEARS), label="now - anchor"))
    ahead = data.draw(st.one_of(st.integers(-3, 3), st.integers(-3, 2 * TEN_YEARS // interval)), label="slots ahead")
    next_after_now = interval_trigger(anchor, interval).next_after(now)
    next_run_at = Instant(max(anchor, next_after_now + ahead * interval))  # a slot of the grid
    fixed = grid_plan(anchor, interval).corrected(next_run_at, now)
    assert fixed == (None if next_run_at <= now + interval else next_after_now)
    # Fixed delay has no grid: whole intervals back from the row's slot, to within one interval of now.
    off_grid = Instant(next_run_at + data.draw(st.integers(0, interval - 1), label="off the grid"))
    delay = grid_plan(anchor, interval, recurrence="fixed_delay").corrected(off_grid, now)
    if off_grid <= now + interval:
        assert delay is None
    else:
        assert delay is not None
        assert now < delay <= now + interval
        assert (off_grid - delay) % interval == 0


@PROPERTY
@given(st.sampled_from(CRONS), st.integers(T - 400 * DAY, T + 400 * DAY), st.integers(-3 * DAY, 400 * DAY))
def test_a_cron_row_is_corrected_to_the_next_fire_after_now(cron: tuple[str, str], now: int, ahead: int) -> None:
    trigger = cron_trigger(*cron)
    next_run_at = trigger.next_after(Instant(now + ahead))
    next_fire = trigger.next_after(Instant(now))
    fixed = JobPlan.of("job", 1, T, Policies(cron=cron[0], timezone=cron[1])).corrected(next_run_at, Instant(now))
    assert fixed == (None if next_run_at <= next_fire else next_fire)


def test_a_lost_slot_is_never_run_again() -> None:
    p = plan()
    assert p.after_loss(at(50), at(40), at(42)) == at(50)  # the claim had moved the row on
    assert p.after_loss(at(40), at(40), at(42)) == at(50)
    assert p.after_loss(at(40), at(40), at(10)) == at(50)  # recovered on a clock behind
    delay = plan(recurrence="fixed_delay")
    assert delay.after_loss(at(40), at(40), at(42)) == at(52)  # one interval from the loss
    assert delay.after_loss(at(40), at(40), at(10)) == at(50)  # ... but never the lost slot


@PROPERTY
@given(anchors, intervals, st.data())
def test_after_loss_never_returns_the_lost_slot_or_before(
    anchor: Instant, interval: Micros, data: st.DataObject
) -> None:
    k = slot_index(interval, data)
    slot = Instant(anchor + k * interval)
    next_run_at = Instant(anchor + max(0, k + data.draw(st.integers(-3, 3), label="row - lost slot")) * interval)
    recovered_at = Instant(slot + data.draw(st.integers(-DAY, DAY), label="recovered - slot"))  # a clock either side
    after = grid_plan(anchor, interval).after_loss(next_run_at, slot, recovered_at)
    assert after > slot
    assert after == max(next_run_at, slot + interval)  # the row's slot, or the one after the lost slot
    delay = grid_plan(anchor, interval, recurrence="fixed_delay").after_loss(next_run_at, slot, recovered_at)
    assert delay > slot
    assert delay == max(recovered_at, slot) + interval


@PROPERTY
@given(st.sampled_from(CRONS), st.integers(T - 400 * DAY, T + 400 * DAY), st.integers(-DAY, DAY), st.integers(0, 3))
def test_a_cron_after_loss_never_returns_the_lost_slot(
    cron: tuple[str, str], t: int, recovered: int, ahead: int
) -> None:
    trigger = cron_trigger(*cron)
    slot = trigger.next_after(Instant(t))
    next_run_at = slot
    for _ in range(ahead):
        next_run_at = trigger.next_after(next_run_at)
    after = JobPlan.of("job", 1, T, Policies(cron=cron[0], timezone=cron[1])).after_loss(
        next_run_at, slot, Instant(slot + recovered)
    )
    assert after > slot
    assert after == (next_run_at if ahead else trigger.next_after(slot))
