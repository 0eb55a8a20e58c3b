"""Excluded dates (`persched._model.exclusions`), pure: the entries schedule() takes, and slots that pass
over the excluded days whole (docs/reference/behaviour.md, "Excluded dates").

The slots with exclusions are checked against the plain grid filtered day by day, on interval grids at odd
microseconds and on cron in a zone that changes to and from daylight-saving time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Final
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persched._model.exclusions import (
    MAX_EXCLUDE_ENTRIES,
    ExcludingSlots,
    exclusions_of,
    validate_exclude,
)
from persched._model.instant import US_PER_SECOND, Instant, Micros, from_datetime, to_datetime
from persched._model.models import Policies, check_stored, validate_policies
from persched._model.policy import JobPlan, place_grid
from persched._model.triggers import NEVER, Slots, cron_trigger, interval_trigger
from persched.errors import InvalidJobError

S: Final = US_PER_SECOND
UTC: Final = timezone.utc
PARIS: Final = ZoneInfo("Europe/Paris")
ODD: Final = Instant(1_700_000_123_456_789)  # 2023-11-14T22:15:23.456789Z
PROPERTY = settings(max_examples=150, deadline=None, database=None)


def instant(text: str, zone: ZoneInfo | timezone = UTC) -> Instant:
    return from_datetime(datetime.fromisoformat(text).replace(tzinfo=zone))


def local_day(s: int, zone: ZoneInfo | timezone = UTC) -> date:
    return to_datetime(s).astimezone(zone).date()


@dataclass
class Counting:
    """A grid that counts the questions asked of it (a search must pass over a span in a few steps)."""

    grid: Slots
    asked: list[str] = field(default_factory=list)

    def next_after(self, t: Instant) -> Instant:
        self.asked.append("next_after")
        return self.grid.next_after(t)

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        self.asked.append("latest")
        return self.grid.latest_at_or_before(t)

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        return self.grid.recent_slots(floor, t, n)

    def count_between(self, a: Instant, b: Instant) -> int | None:
        self.asked.append("count")
        return self.grid.count_between(a, b)

    def describe(self) -> str:
        return self.grid.describe()


# -- the entries --------------------------------------------------------------------------------------


def test_entries_are_kept_canonical_sorted_and_once() -> None:
    entries = ["2026-12-31", date(2026, 12, 25), "2026-12-24/2026-12-26", "2026-12-25", "2027-01-01/2027-01-01"]
    assert validate_exclude(entries) == ("2026-12-24/2026-12-26", "2026-12-25", "2026-12-31", "2027-01-01")
    assert validate_exclude(("2026-12-25",)) == validate_exclude({"2026-12-25"}) == ("2026-12-25",)
    assert validate_exclude([]) is None
    assert validate_exclude(None) is None


def test_at_most_a_thousand_entries() -> None:
    days = [date(2026, 1, 1) + timedelta(days=i) for i in range(MAX_EXCLUDE_ENTRIES + 1)]
    assert validate_exclude(days[:-1]) is not None
    with pytest.raises(InvalidJobError, match=r"^exclude: must have at most 1000 entries, got 1001$"):
        validate_exclude(days)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-12-25", "must be a list of entries"),  # a str is not a list of entries
        (b"2026-12-25", "must be a list of entries"),
        (date(2026, 12, 25), "must be a list of entries"),
        ({"2026-12-25": 1}, "must be a list of entries"),
        (20261225, "must be a list of entries"),
        (["2026-12-26/2026-12-24"], "entry 0 '2026-12-26/2026-12-24' is a reversed range"),
        ([True], "entry 0 True is not a date"),
        (["2026-12-25", ["2026-12-26"]], "entry 1 ['2026-12-26'] is not a date"),
        ([datetime(2026, 12, 25, tzinfo=UTC)], "is a datetime, not a date"),
        ([datetime(2026, 12, 25)], "is a datetime, not a date"),
        (["2026-02-30"], "entry 0 '2026-02-30' is not a date"),
        (["2026-12-25T00:00"], "is not a date"),
        (["20261225"], "is not a date"),  # date.fromisoformat would take it: YYYY-MM-DD only
        (["\uff12\uff10\uff12\uff16-12-25"], "is not a date"),  # full-width digits
        ([" 2026-12-25"], "is not a date"),
        (["2026-12-24/2026-12-25/2026-12-26"], "is not a date"),
        (["2026-12-24/"], "is not a date"),
        ([None], "entry 0 None is not a date"),
        ([1.5], "is not a date"),
        # No day follows the calendar's last: the job would never have a slot again (its next slot overflows).
        (["2026-01-01/9999-12-31"], "entry 0 '2026-01-01/9999-12-31' excludes every slot from 2026-01-01 on"),
        ([date(9999, 12, 31)], "excludes every slot from 9999-12-31 on"),
    ],
)
def test_a_bad_entry_is_refused_by_name(value: object, words: str) -> None:
    with pytest.raises(InvalidJobError, match=r"^exclude: ") as caught:
        validate_policies(60.0, exclude=value)
    assert words in str(caught.value)
    assert caught.value.argument == "exclude"


_junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30), st.binary(max_size=5)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


@PROPERTY
@given(entries=st.lists(_junk, min_size=1, max_size=4))
def test_fuzz_any_shape_is_canonical_or_refused_naming_exclude(entries: list[Any]) -> None:
    try:
        canonical = validate_exclude(entries)
    except InvalidJobError as exc:
        refused: InvalidJobError | None = exc
    else:
        refused = None
    if refused is not None:
        assert refused.argument == "exclude"
        assert str(refused).startswith("exclude: ")
        return
    assert canonical is not None
    assert validate_exclude(list(canonical)) == canonical  # canonical entries read back as they are
    assert all(10 <= len(entry) <= 21 for entry in canonical)


def test_one_shot_jobs_take_no_exclusions() -> None:
    with pytest.raises(InvalidJobError, match=r"^exclude: a one-shot job"):
        validate_policies(run_at=datetime(2027, 1, 1, tzinfo=UTC), exclude=["2027-01-01"])


def test_stored_entries_are_checked_like_arguments() -> None:
    policies = validate_policies(60.0, exclude=["2026-12-25"])
    check_stored(policies)
    for hand_edited in (("2026-13-45",), "not json", ("2026-12-25/2026-12-01",)):
        with pytest.raises(InvalidJobError, match=r"^exclude: "):
            check_stored(Policies(interval=Micros(60 * S), exclude=hand_edited))  # type: ignore[arg-type]


def test_the_column_round_trips_and_an_unreadable_one_is_refused() -> None:
    policies = validate_policies(60.0, exclude=["2026-12-25", "2026-12-30/2027-01-02"])
    column = policies.columns()["exclude"]
    assert column == '["2026-12-25","2026-12-30/2027-01-02"]'
    assert Policies.from_columns({**policies.columns()}.__getitem__) == policies
    for garbage in ("[", '{"a": 1}', "[1, 2]", '"2026-12-25"'):
        broken = Policies.from_columns({**policies.columns(), "exclude": garbage}.__getitem__)
        with pytest.raises(InvalidJobError, match=r"^exclude: "):
            check_stored(broken)


# -- the spans ----------------------------------------------------------------------------------------


def test_a_span_runs_from_the_first_midnight_to_the_midnight_after_in_the_zone() -> None:
    spans = exclusions_of(("2027-03-27/2027-03-28",), "Europe/Paris")  # Paris springs forward on the 28th
    assert spans.starts == (instant("2027-03-27T00:00", PARIS),)
    assert spans.ends == (instant("2027-03-29T00:00", PARIS),)
    assert spans.ends[0] - spans.starts[0] == (48 - 1) * 3600 * S  # one hour shorter
    # Overlapping and adjacent entries are one span.
    merged = exclusions_of(("2027-01-01/2027-01-03", "2027-01-02", "2027-01-04", "2027-01-06"), "UTC")
    assert merged.starts == (instant("2027-01-01T00:00"), instant("2027-01-06T00:00"))
    assert merged.ends == (instant("2027-01-05T00:00"), instant("2027-01-07T00:00"))


def test_a_day_that_begins_in_a_gap_begins_at_its_end() -> None:
    # Santiago springs forward at midnight: 2026-09-06 00:00 does not exist, the day begins at 01:00.
    santiago = ZoneInfo("America/Santiago")
    spans = exclusions_of(("2026-09-06",), "America/Santiago")
    first = spans.starts[0]
    assert local_day(first, santiago) == date(2026, 9, 6)
    assert local_day(first - 1, santiago) == date(2026, 9, 5)


def test_the_ends_of_the_calendar() -> None:
    spans = exclusions_of(("0001-01-01", "9999-12-31"), "Asia/Tokyo")
    assert spans.ends[-1] == NEVER
    grid = ExcludingSlots(interval_trigger(ODD, Micros(3600 * S)), spans)
    assert grid.next_after(instant("9999-12-30T15:30")) == NEVER  # 00:30 on the 31st in Tokyo
    assert grid.latest_at_or_before(ODD) == ODD


# -- the slots, against the plain grid filtered day by day --------------------------------------------


def filtered(
    grid: Slots, first: Instant, last: Instant, excluded: set[date], zone: ZoneInfo | timezone
) -> list[Instant]:
    slots, s = [], grid.next_after(Instant(first - 1))
    while s <= last:
        if local_day(s, zone) not in excluded:
            slots.append(s)
        s = grid.next_after(s)
    return slots


def days_of(entries: tuple[str, ...]) -> set[date]:
    days = set()
    for entry in entries:
        first, _, last = entry.partition("/")
        day, end = date.fromisoformat(first), date.fromisoformat(last or first)
        while day <= end:
            days.add(day)
            day += timedelta(days=1)
    return days


ranges = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 3)).map(
        lambda t: f"{date(2027, 3, 20) + timedelta(days=t[0])}/{date(2027, 3, 20) + timedelta(days=t[0] + t[1])}"
    ),
    min_size=1,
    max_size=5,
)


@PROPERTY
@given(
    entries=ranges,
    interval=st.sampled_from([Micros(7 * 3600 * S + 123_457), Micros(5400 * S), Micros(86_400 * S + 1)]),
    zone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York"]),
)
def test_interval_slots_are_the_grid_without_the_excluded_days(entries: list[str], interval: Micros, zone: str) -> None:
    canonical = validate_exclude(entries)
    assert canonical is not None
    grid = interval_trigger(ODD, interval)
    excluding = ExcludingSlots(grid, exclusions_of(canonical, zone))
    first, last = instant("2027-03-18T00:00"), instant("2027-04-15T00:00")
    expected = filtered(grid, first, last, days_of(canonical), ZoneInfo(zone))
    assert filtered(excluding, first, last, set(), UTC) == expected
    assert excluding.count_between(first, last) == len(expected)
    assert excluding.recent_slots(first, last, 5) == expected[-5:]
    assert excluding.latest_at_or_before(last) == expected[-1]


@PROPERTY
@given(entries=ranges, cron=st.sampled_from(["30 2 * * *", "0 * * * *", "15 1 * * 0"]))
def test_cron_slots_across_a_daylight_saving_change_skip_the_excluded_days(entries: list[str], cron: str) -> None:
    canonical = validate_exclude(entries)
    assert canonical is not None
    grid = cron_trigger(cron, "Europe/Paris")
    excluding = ExcludingSlots(grid, exclusions_of(canonical, "Europe/Paris"))
    first, last = instant("2027-03-18T00:00"), instant("2027-04-15T00:00")
    expected = filtered(grid, first, last, days_of(canonical), PARIS)
    assert filtered(excluding, first, last, set(), UTC) == expected
    assert excluding.count_between(first, last) == len(expected)
    assert excluding.recent_slots(first, last, 3) == expected[-3:]


def test_the_spring_forward_slot_of_an_excluded_day_does_not_run() -> None:
    # 02:30 does not exist on 2027-03-28 in Paris: it fires at 03:00 CEST that day, unless the day is excluded.
    grid = cron_trigger("30 2 * * *", "Europe/Paris")
    assert grid.next_after(instant("2027-03-27T12:00", PARIS)) == instant("2027-03-28T03:00", PARIS)
    excluding = ExcludingSlots(grid, exclusions_of(("2027-03-28",), "Europe/Paris"))
    assert excluding.next_after(instant("2027-03-27T12:00", PARIS)) == instant("2027-03-29T02:30", PARIS)
    # The fall-back day: 02:30 fires once, at its first occurrence, and not at all when excluded.
    fall = ExcludingSlots(grid, exclusions_of(("2027-10-31",), "Europe/Paris"))
    assert fall.next_after(instant("2027-10-30T12:00", PARIS)) == instant("2027-11-01T02:30", PARIS)


def test_a_fine_grid_jumps_over_a_long_span_in_a_few_steps() -> None:
    counting = Counting(interval_trigger(ODD, Micros(S // 2)))
    spans = exclusions_of(("2023-11-15/2023-11-17",), "UTC")  # three days: 518,400 half-second slots
    excluding = ExcludingSlots(counting, spans)
    after = excluding.next_after(instant("2023-11-14T23:59:59.96"))  # the grid falls on .456789 and .956789
    assert local_day(after) == date(2023, 11, 18)
    assert after - instant("2023-11-18T00:00") < S // 2
    before = excluding.latest_at_or_before(instant("2023-11-17T12:00"))
    assert before is not None
    assert local_day(before) == date(2023, 11, 14)
    assert excluding.count_between(instant("2023-11-14T23:59"), instant("2023-11-18T00:01")) == 2 * 60 * 2
    assert len(counting.asked) <= 10


def test_every_search_ends_when_every_slot_is_excluded() -> None:
    # A yearly cron on the one excluded day of each year it fires: the search ends (cronsim gives up after
    # fifty years without a match; the interval grid runs past the last span).
    days = tuple(f"{year}-01-01" for year in range(2027, 2027 + MAX_EXCLUDE_ENTRIES))
    excluding = ExcludingSlots(cron_trigger("0 0 1 1 *", "UTC"), exclusions_of(days, "UTC"))
    assert excluding.next_after(instant("2026-06-01T00:00")) == instant(f"{2027 + MAX_EXCLUDE_ENTRIES}-01-01T00:00")
    daily = ExcludingSlots(
        interval_trigger(instant("2027-01-01T00:00"), Micros(86_400 * S)), exclusions_of(days, "UTC")
    )
    assert daily.latest_at_or_before(instant("2027-01-01T12:00")) is None


# -- the plan: placing, claiming, fixed delay ---------------------------------------------------------


def plan_of(anchor: Instant, interval: float | None = 3600.0, **options: Any) -> JobPlan:  # noqa: ANN401
    return JobPlan.of("job", 1, anchor, validate_policies(interval, **options))


def test_a_new_grid_starts_at_its_first_slot_after_the_excluded_days() -> None:
    now = instant("2026-12-24T10:00:00.123457")
    policies = validate_policies(3600.0, exclude=["2026-12-24/2026-12-26"])
    anchor, first = place_grid(policies, now, None)
    assert anchor == now + 3600 * S  # the grid keeps its phase
    assert first == instant("2026-12-27T00:00:00.123457")
    cron = validate_policies(cron="0 3 * * *", timezone="Europe/Paris", exclude=["2026-12-24/2026-12-26"])
    assert place_grid(cron, now, None)[1] == instant("2026-12-27T03:00", PARIS)
    delay = validate_policies(3600.0, recurrence="fixed_delay", exclude=["2026-12-24/2026-12-26"])
    assert place_grid(delay, now, None)[1] == instant("2026-12-27T00:00")


def test_catch_up_does_not_catch_up_an_excluded_slot() -> None:
    anchor = instant("2026-12-23T00:00:00.5")
    plan = plan_of(anchor, 3600.0, misfire="catch_up", max_catch_up=5, exclude=["2026-12-24/2026-12-26"])
    # Down from the 23rd 22:00 to the 27th 01:30: the 23rd's 23:00 and the 27th's 00:00 and 01:00 run.
    now = instant("2026-12-27T01:30")
    decision = plan.claim(instant("2026-12-23T22:00:00.5"), None, now, now, now)
    assert decision.run_for == instant("2026-12-23T22:00:00.5")
    assert decision.next_run_at == instant("2026-12-23T23:00:00.5")
    decision = plan.claim(decision.next_run_at, None, now, now, now)
    assert decision.next_run_at == instant("2026-12-27T00:00:00.5")
    # With room for two only: the two most recent run, the older ones are missed (and counted without the span).
    two = plan_of(anchor, 3600.0, misfire="catch_up", max_catch_up=2, exclude=["2026-12-24/2026-12-26"])
    decision = two.claim(instant("2026-12-23T22:00:00.5"), None, now, now, now)
    assert decision.run_for == instant("2026-12-27T00:00:00.5")
    assert decision.missed is not None
    assert decision.missed.count == 2  # the 23rd's 22:00 and 23:00, not the 72 excluded slots


def test_coalesce_and_skip_never_run_an_excluded_slot() -> None:
    anchor = instant("2026-12-23T00:00:00.5")
    now = instant("2026-12-25T12:00")  # inside the excluded span, late since the 23rd 22:00
    for misfire in ("coalesce", "skip"):
        plan = plan_of(anchor, 3600.0, misfire=misfire, exclude=["2026-12-24/2026-12-26"])
        decision = plan.claim(instant("2026-12-23T22:00:00.5"), None, now, now, now)
        assert decision.run_for in (None, instant("2026-12-23T23:00:00.5"))
        assert decision.next_run_at == instant("2026-12-27T00:00:00.5")


def test_fixed_delay_moves_a_due_time_past_the_excluded_days() -> None:
    plan = plan_of(ODD, 3600.0, recurrence="fixed_delay", exclude=["2023-11-15"])
    next_at, missed = plan.after_run(ODD, instant("2023-11-14T23:30"))
    assert (next_at, missed) == (instant("2023-11-16T00:00"), None)
    assert plan.after_run(ODD, instant("2023-11-14T20:00"))[0] == instant("2023-11-14T21:00")
    assert plan.resumed(instant("2023-11-14T23:59"), ODD) == instant("2023-11-16T00:00")


def test_a_clock_correction_keeps_the_phase_and_skips_the_excluded_days() -> None:
    anchor = instant("2026-12-20T00:00:00.25")
    plan = JobPlan.of(
        "job", 1, anchor, validate_policies(3600.0, start_at=to_datetime(anchor), exclude=["2026-12-24/2026-12-26"])
    )
    # Written by a clock a month ahead; the clock now reads the 24th: back to the 27th's first slot.
    corrected = plan.corrected(instant("2027-01-20T05:00:00.25"), instant("2026-12-24T10:00"))
    assert corrected == instant("2026-12-27T00:00:00.25")
    assert plan.corrected(instant("2026-12-27T00:00:00.25"), instant("2026-12-24T10:00")) is None


def test_a_next_slot_past_an_excluded_span_is_within_the_schedule() -> None:
    now = instant("2027-03-26T23:40:00.123457")  # 20 min before a three-day span
    days = ["2027-03-27/2027-03-29"]
    # Fixed delay: a run that ends now waits for the span's end, 48 h 20 min on: no correction.
    delay = plan_of(ODD, 3600.0, recurrence="fixed_delay", exclude=days)
    assert delay.corrected(instant("2027-03-30T00:00"), now) is None
    # Beyond where a run ending now could put it: back to one interval on, past the span.
    assert delay.corrected(instant("2027-04-02T00:00"), now) == instant("2027-03-30T00:00")
    # Hourly and cron: the grid's next slot is past the span, three days on.
    hourly = plan_of(instant("2027-03-20T00:15:23.456789"), 3600.0, exclude=days)
    assert hourly.corrected(instant("2027-03-30T00:15:23.456789"), now) is None
    cron = plan_of(ODD, None, cron="15 * * * *", exclude=days)
    assert cron.corrected(instant("2027-03-30T00:15"), now) is None


def test_coming_slots_pass_over_the_excluded_days() -> None:
    plan = plan_of(instant("2026-12-23T22:00:00.5"), 3600.0, exclude=["2026-12-24/2026-12-26"])
    assert plan.coming(instant("2026-12-23T22:00:00.5"), 3) == [
        instant("2026-12-23T22:00:00.5"),
        instant("2026-12-23T23:00:00.5"),
        instant("2026-12-27T00:00:00.5"),
    ]
    assert "excluded" in plan.describe()
