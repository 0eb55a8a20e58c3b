"""`persched._model.models.OPTIONS`: each option of schedule() declared once, and the surfaces that must
stay explicit (for users and mypy) checked against that declaration; the trigger registry."""

from __future__ import annotations

import dataclasses
import inspect
import re
from datetime import datetime, timezone
from typing import Any

import pytest

from persched import AsyncJobScheduler, Job, JobScheduler
from persched._model.instant import Instant, Micros, from_datetime
from persched._model.models import (
    CLAIM_POLICY_COLUMNS,
    KEYWORD_OPTIONS,
    OPTIONS,
    Policies,
    check_stored,
    validate_policies,
)
from persched._model.policy import JobPlan, place_grid
from persched._model.triggers import TRIGGERS, CronTrigger, IntervalTrigger, OneShotTrigger, chosen_kind, kind_of
from persched._store.schema import jobs
from persched.errors import InvalidJobError

WHEN = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
# One job of each kind of trigger, and one that sets every other option.
KINDS: dict[str, dict[str, Any]] = {
    "interval": {"interval_seconds": 60.0},
    "cron": {"cron": "0 3 * * *", "timezone": "Europe/Paris"},
    "once": {"run_at": WHEN},
    "every option": {
        "interval_seconds": 0.25,
        "misfire": "catch_up",
        "max_catch_up": 3,
        "grace_seconds": 0.0,
        "overlap": "skip",
        "jitter_seconds": 1.5,
        "start_at": WHEN,
        "end_at": WHEN.replace(year=2031),
        "max_runtime_seconds": 30.0,
        "on_overrun": "stop",
        "executor": "process",
        "stop_grace_seconds": 0.75,
        "exclude": ["2030-06-01/2030-06-03", "2030-12-25"],
    },
}


def policies_of(arguments: dict[str, Any]) -> Policies:
    options = dict(arguments)
    return validate_policies(options.pop("interval_seconds", None), **options)


def test_each_option_is_a_job_field_with_its_default() -> None:
    for option in OPTIONS:
        field = Job.model_fields[option.name]
        # Job.interval_seconds has no default: every stored job has the column (None for cron, one-shot).
        assert field.is_required() == (option.name == "interval_seconds")
        assert field.is_required() or field.default == option.default, option.name


def test_each_option_but_run_at_is_a_policies_field_and_a_column() -> None:
    assert {f.name for f in dataclasses.fields(Policies)} == {o.attr for o in OPTIONS if o.attr is not None}
    stored = [o.name for o in OPTIONS if o.attr is not None]
    assert all(name in jobs.c for name in stored)
    assert set(Policies().columns()) == set(stored)
    assert [o.name for o in OPTIONS if o.attr is None] == ["run_at"]


def test_policies_defaults_are_the_options_defaults() -> None:
    # Policies() holds what schedule() writes for the options left at their defaults.
    assert dataclasses.replace(validate_policies(1.0), interval=None) == Policies()


def test_schedule_takes_each_option_with_its_default() -> None:
    for front_end in (JobScheduler.schedule, AsyncJobScheduler.schedule):
        parameters = inspect.signature(front_end).parameters
        keyword_only = [p.name for p in parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert [name for name in keyword_only if name not in ("args", "kwargs", "start_in")] == [
            o.name for o in KEYWORD_OPTIONS
        ]
        assert parameters["interval_seconds"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        for option in OPTIONS:
            assert parameters[option.name].default == option.default, option.name


def _args_entries(doc: str) -> dict[str, str]:
    section = doc.split("Args:\n", 1)[1].split("\n\n", 1)[0]
    entries: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        found = re.match(r"\s{12}(\w+): (.*)", line)
        if found:
            name, entries[found[1]] = found[1], found[2]
        else:
            entries[name] += " " + line.strip()
    return entries


def test_schedules_docstring_documents_each_option() -> None:
    entries = _args_entries(JobScheduler.schedule.__doc__ or "")
    for option in OPTIONS:
        assert entries.get(option.name), option.name


@pytest.mark.parametrize("kind", KINDS)
def test_columns_map_back_to_the_same_policies(kind: str) -> None:
    policies = policies_of(KINDS[kind])
    columns = policies.columns()
    assert Policies.from_columns(columns.__getitem__) == policies
    claimed = {name: columns[name] for name in CLAIM_POLICY_COLUMNS}
    assert Policies.from_columns(claimed.__getitem__, for_claims=True) == dataclasses.replace(policies, start_at=None)
    check_stored(policies)  # what schedule() wrote passes the check of a row read back


@pytest.mark.parametrize(
    ("kind", "trigger"), [("interval", IntervalTrigger), ("cron", CronTrigger), ("once", OneShotTrigger)]
)
def test_each_kind_of_trigger_is_chosen_by_its_argument(kind: str, trigger: type[Any]) -> None:
    policies = policies_of(KINDS[kind])
    assert kind_of(policies) is trigger
    assert trigger in TRIGGERS
    assert trigger.ARGUMENT in {o.name for o in OPTIONS}
    kept: dict[str, Any] = trigger.fields_of(trigger.argument_of(policies))
    assert dataclasses.replace(policies, **kept) == policies
    anchor, first = place_grid(policies, Instant(from_datetime(WHEN) - 10**9), None)
    built = JobPlan.of("job", 1, anchor, policies).trigger
    assert isinstance(built, trigger)
    assert built.next_after(Instant(first - 1)) == first


def test_exactly_one_kind_of_trigger() -> None:
    message = "give exactly one of interval_seconds, cron and run_at"
    for given, argument in (
        ((), "interval_seconds"),
        (("interval_seconds", "cron"), "interval_seconds"),
        (("cron", "run_at"), "cron"),
        (("interval_seconds", "cron", "run_at"), "interval_seconds"),
    ):
        with pytest.raises(InvalidJobError, match=message) as info:
            chosen_kind(given.__contains__)
        assert info.value.argument == argument
    assert chosen_kind(("run_at",).__contains__) is OneShotTrigger


def test_a_fixed_delay_job_has_no_grid() -> None:
    policies = validate_policies(5.0, recurrence="fixed_delay")
    plan = JobPlan.of("job", 1, Instant(0), policies)
    assert plan.trigger is None
    assert plan.describe() == "every 5 s after each run ends"
    assert plan.interval == Micros(5_000_000)


@pytest.mark.parametrize(
    ("argument", "extra"),
    [
        ("misfire", {"interval_seconds": 60.0}),
        ("overlap", {"interval_seconds": 60.0}),
        ("recurrence", {"interval_seconds": 60.0}),
        ("timezone", {"cron": "* * * * *"}),
        ("start_at", {"interval_seconds": 60.0}),
        ("end_at", {"cron": "* * * * *"}),
        ("run_at", {}),
    ],
)
def test_an_int_too_long_to_print_is_refused_by_name(argument: str, extra: dict[str, Any]) -> None:
    # repr() of an int past 4,300 digits raises ValueError: the message names its size (found by the fuzz test).
    with pytest.raises(InvalidJobError, match="an integer of 16610 bits") as info:
        policies_of({**extra, argument: 10**5000})
    assert info.value.argument == argument
