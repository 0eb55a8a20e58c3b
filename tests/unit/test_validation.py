"""`schedule()` validation: bad input raises InvalidJobError naming the
argument, and writes nothing.

Every refused call is made on a store that already holds one job ("keep"), so
"writes nothing" is checked as: `jobs()` still returns exactly that job,
unchanged, and the refused id is absent.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pydantic
import pytest

from persched import Job, JobScheduler, JobState
from persched._model.checks import as_json
from persched.errors import InvalidJobError, PerschedError, StoreError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import at, wait_until
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.conftest import SchedulerFactory

RECORD = "tests.support.jobs:record"


@pytest.fixture
def sched(make_scheduler: SchedulerFactory) -> JobScheduler:
    """An unstarted scheduler (schedule() works before start()) holding job "keep"."""
    s = make_scheduler()
    s.schedule("keep", jobs.record, 10.0, args=("keep",))
    return s


def assert_refused(
    sched: JobScheduler, argument: str, call: Callable[[], object], job_id: str | None = None
) -> InvalidJobError:
    """Assert that `call` raises InvalidJobError naming `argument` and wrote nothing."""
    before = sched.get_job("keep")
    with pytest.raises(InvalidJobError) as excinfo:
        call()
    err = excinfo.value
    assert isinstance(err, ValueError)
    assert isinstance(err, PerschedError)
    assert re.search(rf"\b{re.escape(argument)}\b", str(err)), str(err)
    assert [j.job_id for j in sched.jobs()] == ["keep"]
    assert sched.get_job("keep") == before
    if job_id is not None:
        assert sched.get_job(job_id) is None
    return err


# --- job_id -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job_id",
    [
        "",
        "x" * 201,
        "a\nb",
        "a\x00b",
        "tab\there",
        "esc\x1b",
        "del\x7f",
        "nel\x85",
        "\r",
    ],
    ids=["empty", "201-chars", "newline", "nul", "tab", "esc", "del", "c1-nel", "cr"],
)
def test_bad_job_id_refused(sched: JobScheduler, job_id: str) -> None:
    assert_refused(sched, "job_id", lambda: sched.schedule(job_id, jobs.record, 10.0))


@pytest.mark.parametrize("job_id", [1, None, b"bytes", ("t",)], ids=["int", "none", "bytes", "tuple"])
def test_non_str_job_id_refused(sched: JobScheduler, job_id: Any) -> None:  # noqa: ANN401  # deliberately ill-typed input
    assert_refused(sched, "job_id", lambda: sched.schedule(job_id, jobs.record, 10.0))


@pytest.mark.parametrize("job_id", ["x" * 200, "a", "report:daily/eu-west 1", "отчёт-1 ✓"])
def test_good_job_id_accepted(sched: JobScheduler, job_id: str) -> None:
    job = sched.schedule(job_id, jobs.record, 10.0)
    assert job.job_id == job_id
    got = sched.get_job(job_id)
    assert got is not None
    assert got.job_id == job_id


# --- fn -----------------------------------------------------------------------------


def _main_function(key: str) -> None:
    jobs.record(key)


_main_function.__module__ = "__main__"


@pytest.mark.parametrize(
    "fn",
    [
        lambda key: None,
        jobs.make_closure(),
        jobs.Holder().method,
        functools.partial(jobs.record, "k"),
        _main_function,
        jobs.Holder(),  # an instance, not a function (and not callable)
        42,
        None,
    ],
    ids=["lambda", "closure", "bound-method", "partial", "__main__", "instance", "int", "none"],
)
def test_unresolvable_fn_refused(sched: JobScheduler, fn: Any) -> None:  # noqa: ANN401  # deliberately ill-typed input
    err = assert_refused(sched, "fn", lambda: sched.schedule("new", fn, 10.0), job_id="new")
    # The message says why; more than just the argument name.
    assert len(str(err)) > len("fn: ") + 10


class _CallableObject:
    def __call__(self, key: str) -> None:
        jobs.record(key)


def test_callable_instance_refused(sched: JobScheduler) -> None:
    assert_refused(sched, "fn", lambda: sched.schedule("new", _CallableObject(), 10.0), job_id="new")


def test_local_function_refused(sched: JobScheduler) -> None:
    def local(key: str) -> None:
        jobs.record(key)

    assert_refused(sched, "fn", lambda: sched.schedule("new", local, 10.0), job_id="new")


@pytest.mark.parametrize(
    "ref",
    [
        "no_such_module_xyz:f",
        "tests.support.jobs:no_such_function",
        "tests.support.jobs",
        ":record",
        "tests.support.jobs:",
        "tests.support.jobs:NOT_CALLABLE",
        "",
        "tests.support.jobs:record:extra",
        "tests support jobs:record",
    ],
)
def test_bad_string_ref_refused(sched: JobScheduler, ref: str) -> None:
    assert_refused(sched, "fn", lambda: sched.schedule("new", ref, 10.0), job_id="new")


@pytest.mark.parametrize(
    ("fn", "target"),
    [
        (jobs.record, RECORD),
        (RECORD, RECORD),
        (jobs.Holder.static_target, "tests.support.jobs:Holder.static_target"),
        (jobs.Holder.class_target, "tests.support.jobs:Holder.class_target"),
        ("tests.support.jobs:Holder.static_target", "tests.support.jobs:Holder.static_target"),
    ],
    ids=["function", "string-ref", "staticmethod", "classmethod", "string-ref-qualname"],
)
def test_resolvable_fn_accepted(sched: JobScheduler, fn: Any, target: str) -> None:  # noqa: ANN401  # deliberately ill-typed input
    job = sched.schedule("new", fn, 10.0)
    assert job.target == target
    stored = sched.get_job("new")
    assert stored is not None
    assert stored.target == target


# --- interval_seconds ---------------------------------------------------------------

TEN_YEARS = 10 * 365 * 86400.0


@pytest.mark.parametrize(
    "interval",
    [0, 0.0, -1.0, -0.001, math.nan, math.inf, -math.inf, True, False, 11 * 365 * 86400.0, "10", None],
    ids=[
        "zero",
        "zero-float",
        "negative",
        "tiny-negative",
        "nan",
        "inf",
        "-inf",
        "true",
        "false",
        "11-years",
        "str",
        "none",
    ],
)
def test_bad_interval_refused(sched: JobScheduler, interval: Any) -> None:  # noqa: ANN401  # deliberately ill-typed input
    assert_refused(sched, "interval_seconds", lambda: sched.schedule("new", jobs.record, interval), job_id="new")


@pytest.mark.parametrize("interval", [0.001, 0.25, 1, 60, TEN_YEARS])
def test_good_interval_accepted(make_scheduler: SchedulerFactory, interval: float) -> None:
    s = make_scheduler()
    job = s.schedule("new", jobs.record, interval)
    assert job.interval_seconds == interval
    # Default start_in is one interval.
    assert job.next_run_at == at(0) + timedelta(seconds=interval)


# --- args / kwargs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (({1, 2},), None),
        ((object(),), None),
        ((math.nan,), None),
        ((math.inf,), None),
        ((b"bytes",), None),
        (([1, {"deep": {2}}],), None),
        ((), {"x": {1}}),
        ((), {"x": object()}),
        ((), {"x": math.nan}),
        ((), {"x": jobs.record}),
    ],
    ids=["set", "object", "nan", "inf", "bytes", "nested-set", "kw-set", "kw-object", "kw-nan", "kw-function"],
)
def test_non_json_args_refused(sched: JobScheduler, args: Any, kwargs: Any) -> None:  # noqa: ANN401  # deliberately ill-typed input
    argument = "args" if args else "kwargs"
    assert_refused(
        sched,
        argument,
        lambda: sched.schedule("new", jobs.record, 10.0, args=args, kwargs=kwargs),
        job_id="new",
    )


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ([], "[]"),
        ({}, "{}"),
        (
            [1, -0.0, 2.5e-300, True, None, "plain", 10**30],
            '[1,-0.0,2.5e-300,true,null,"plain",' + "1" + "0" * 30 + "]",
        ),
        ({"b": 1, "a": "x", "c": None}, '{"a":"x","b":1,"c":null}'),
        (["é", "😀"], '["\\u00e9","\\ud83d\\ude00"]'),
        ([[1], {"k": [2]}], '[[1],{"k":[2]}]'),
        ([[1], {"k": (2,)}], None),  # a tuple inside comes back a list
        ({1: "key"}, None),  # an int key comes back text
        ([1, (2, 3)], None),
        ([math.nan], None),
        ({"x": math.inf}, None),
        ([10**5000], None),  # more digits than int() reads back
        (["lone \udc80"], None),
        ({"lone \udc80": 1}, None),
    ],
    ids=lambda value: type(value).__name__,
)
def test_arguments_flat_or_nested_are_written_and_refused_alike(value: object, stored: str | None) -> None:
    """Flat arguments (plain scalars, one level) skip the shape check and the round trip: same text, same refusals."""
    if stored is None:
        with pytest.raises(InvalidJobError):
            as_json("args", value)
    else:
        assert as_json("args", value) == stored
        assert json.loads(stored) == value


def test_json_args_round_trip(sched: JobScheduler) -> None:
    args = (1, "two", 3.5, None, True, [1, 2], {"k": ["v", {"n": 1}]})
    kwargs = {"to": "ops", "ünï": "cødé ✓", "nested": {"a": [1, None]}}
    job = sched.schedule("new", jobs.record, 10.0, args=args, kwargs=kwargs)
    for j in (job, sched.get_job("new")):
        assert j is not None
        assert list(j.args) == list(args)
        assert dict(j.kwargs) == kwargs


# --- start_in -----------------------------------------------------------------------


@pytest.mark.parametrize("start_in", [-1.0, -0.001, math.nan, math.inf, True], ids=str)
def test_bad_start_in_refused(sched: JobScheduler, start_in: Any) -> None:  # noqa: ANN401  # deliberately ill-typed input
    assert_refused(
        sched,
        "start_in",
        lambda: sched.schedule("new", jobs.record, 10.0, start_in=start_in),
        job_id="new",
    )


@pytest.mark.parametrize(("start_in", "offset"), [(None, 10.0), (0, 0.0), (2.5, 2.5), (100, 100.0)])
def test_start_in_sets_first_run(sched: JobScheduler, start_in: float | None, offset: float) -> None:
    job = sched.schedule("new", jobs.record, 10.0, start_in=start_in)
    assert job.next_run_at == at(offset)


# --- a refused re-declaration leaves the existing job alone ---------------------------


def test_refused_replacement_leaves_job_unchanged(sched: JobScheduler) -> None:
    assert_refused(sched, "interval_seconds", lambda: sched.schedule("keep", jobs.record, -5.0))
    assert_refused(sched, "fn", lambda: sched.schedule("keep", lambda: None, 10.0))
    assert_refused(sched, "args", lambda: sched.schedule("keep", jobs.record, 10.0, args=({1},)))


# --- the models ---------------------------------------------------------------------


def test_job_model_fields(sched: JobScheduler) -> None:
    job = sched.get_job("keep")
    assert isinstance(job, Job)
    assert job.job_id == "keep"
    assert job.target == RECORD
    assert list(job.args) == ["keep"]
    assert dict(job.kwargs) == {}
    assert job.interval_seconds == 10.0
    assert job.state is JobState.SCHEDULED
    assert job.state.value == "scheduled"
    assert isinstance(job.generation, int)
    for stamp in (job.next_run_at, job.created_at, job.updated_at):
        assert stamp.tzinfo is not None
        assert stamp.utcoffset() == timedelta(0)
    assert job.next_run_at == at(10)
    assert job.created_at == at(0).astimezone(timezone.utc)


def test_job_is_immutable(sched: JobScheduler) -> None:
    job = sched.get_job("keep")
    assert job is not None
    with pytest.raises(pydantic.ValidationError):
        job.interval_seconds = 1.0  # type: ignore[misc]  # frozen: the point of the test


def test_job_state_values() -> None:
    assert {s.value for s in JobState} == {"scheduled", "running", "paused", "finished", "descheduled"}
    assert JobState("running") is JobState.RUNNING
    assert isinstance(JobState.SCHEDULED, str)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "3", 4097, 2**40])
def test_workers_is_a_bounded_whole_number(tmp_path: Path, workers: object) -> None:
    """A pool's threads are made up front: 2**40 workers must be refused, not attempted."""
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(f"sqlite:///{tmp_path / 'w.db'}", workers=workers)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "workers"
    assert not (tmp_path / "w.db").exists()


# --- input that escaped validation ---------------------------------

HUGE = 10**400  # beyond any float: float(HUGE) raises OverflowError
MINUTES = ",".join(str(m) for m in range(60))  # a valid cron field of 170 characters


@pytest.mark.parametrize(
    ("argument", "options"),
    [
        ("interval_seconds", {"interval_seconds": HUGE}),
        ("interval_seconds", {"interval_seconds": -HUGE}),
        ("start_in", {"start_in": HUGE}),
        ("grace_seconds", {"grace_seconds": HUGE}),
        ("jitter_seconds", {"jitter_seconds": HUGE}),
        ("max_runtime_seconds", {"max_runtime_seconds": HUGE}),
        ("max_catch_up", {"misfire": "catch_up", "max_catch_up": HUGE}),
        ("max_catch_up", {"misfire": "catch_up", "max_catch_up": 2**31}),
        ("cron", {"interval_seconds": None, "cron": f"{MINUTES},{MINUTES} * * * *"}),
        ("timezone", {"interval_seconds": None, "cron": "* * * * *", "timezone": "Europe/" + "x" * 100}),
        ("timezone", {"interval_seconds": None, "cron": "* * * * *", "timezone": "UTC\udc80"}),
        ("cron", {"interval_seconds": None, "cron": "* * * * \udc80"}),
        ("start_at", {"start_at": datetime(9999, 1, 1, tzinfo=timezone.utc)}),
        ("end_at", {"end_at": datetime(9999, 12, 31, tzinfo=timezone.utc)}),
    ],
    ids=lambda v: v if isinstance(v, str) else next(iter(v)) if len(v) == 1 else list(v)[-1],
)
def test_out_of_range_options_refused(sched: JobScheduler, argument: str, options: dict[str, Any]) -> None:
    given = {"interval_seconds": 10.0, **options}
    assert_refused(sched, argument, lambda: sched.schedule("new", jobs.record, **given), "new")


def test_numbers_of_any_size_name_their_argument_without_overflow(sched: JobScheduler) -> None:
    err = assert_refused(sched, "interval_seconds", lambda: sched.schedule("new", jobs.record, 10**5000), "new")
    assert "bits" in str(err)  # repr() of a 5,000-digit int itself raises: the message says its size
    assert len(str(err)) < 300


@pytest.mark.parametrize("where", ["args", "kwargs"])
def test_arguments_nested_too_deeply_refused(sched: JobScheduler, where: str) -> None:
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    options = {"args": [deep]} if where == "args" else {"kwargs": {"k": deep}}
    err = assert_refused(sched, where, lambda: sched.schedule("new", jobs.record, 10.0, **options), "new")
    assert "nested" in str(err)


# Every option but args and kwargs (their own test above), each with the interval or cron it needs.
_OPTIONS_OF_A_GIVEN_SHAPE = [
    "interval_seconds", "start_in", "cron", "timezone", "recurrence", "misfire", "max_catch_up", "grace_seconds",
    "overlap", "jitter_seconds", "start_at", "end_at", "max_runtime_seconds", "on_overrun", "executor",
    "stop_grace_seconds", "exclude", "pause_after_failures", "retries", "retry_delay_seconds", "retry_backoff",
    "retry_max_delay_seconds", "retry_lost", "run_at",
]  # fmt: skip


@pytest.mark.parametrize("argument", _OPTIONS_OF_A_GIVEN_SHAPE)
def test_any_option_nested_past_the_recursion_limit_is_refused_by_name(sched: JobScheduler, argument: str) -> None:
    """A value whose repr() itself exceeds the recursion limit: the message must still be written
    (a RecursionError raised while wording it escaped for the time zone, depending on how deep the
    caller's stack already was)."""
    deep: Any = "leaf"
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    given: dict[str, Any] = {argument: deep}
    if argument not in ("interval_seconds", "cron", "run_at"):
        given["interval_seconds"] = 10.0
    assert_refused(sched, argument, lambda: sched.schedule("new", jobs.record, **given), "new")


def test_arguments_nested_moderately_are_kept(sched: JobScheduler) -> None:
    nested: Any = "leaf"
    for _ in range(30):  # 60 levels (the limit is 100)
        nested = {"k": [nested]}
    job = sched.schedule("nested", jobs.record, 10.0, args=[nested])
    assert job.args == (nested,)


@pytest.mark.parametrize(
    ("where", "options"),
    [
        ("args", {"args": ["lone \udc80 surrogate"]}),
        ("args", {"args": [{"deep": ["\ud800"]}]}),
        ("kwargs", {"kwargs": {"key\udfff": 1}}),
        ("kwargs", {"kwargs": {"k": "\udc80"}}),
    ],
    ids=["args", "args-nested", "kwargs-key", "kwargs-value"],
)
def test_unencodable_strings_in_arguments_refused(sched: JobScheduler, where: str, options: dict[str, Any]) -> None:
    assert_refused(sched, where, lambda: sched.schedule("new", jobs.record, 10.0, **options), "new")


@pytest.mark.parametrize("job_id", ["lone\udc80", "\ud800", "pair-ok-but-\udfff-alone"])
def test_unencodable_job_id_refused(sched: JobScheduler, job_id: str) -> None:
    err = assert_refused(sched, "job_id", lambda: sched.schedule(job_id, jobs.record, 10.0))
    assert "surrogate" in str(err)
    for method in (sched.deschedule, sched.pause, sched.resume, sched.run_now, sched.get_job, sched.runs):
        with pytest.raises(InvalidJobError) as raised:
            method(job_id)
        assert raised.value.argument == "job_id"


@pytest.mark.parametrize("where", ["args", "kwargs"])
def test_arguments_larger_than_max_args_bytes_refused(make_scheduler: SchedulerFactory, where: str) -> None:
    sched = make_scheduler()
    sched.schedule("keep", jobs.record, 10.0)
    big = "x" * (64 * 1024)  # 64 KiB of text is more than 64 KiB of JSON (the quotes)
    options = {"args": [big]} if where == "args" else {"kwargs": {"k": big}}
    err = assert_refused(sched, where, lambda: sched.schedule("big", jobs.record, 10.0, **options), "big")
    assert "max_args_bytes" in str(err)
    roomy = JobScheduler(make_scheduler.url, clock=make_scheduler.clock, max_args_bytes=128 * 1024)
    make_scheduler.created.append(roomy)
    assert roomy.schedule("big", jobs.record, 10.0, **options).job_id == "big"


def test_a_non_bmp_character_is_not_a_surrogate(sched: JobScheduler) -> None:
    job = sched.schedule("emoji-😀", jobs.record, 10.0, args=["😀"], kwargs={"😀": "😀"})
    assert (job.job_id, job.args, job.kwargs) == ("emoji-😀", ("😀",), {"😀": "😀"})


def test_a_target_longer_than_its_column_refused(sched: JobScheduler) -> None:
    ref = "tests.support.jobs:" + ".".join(["record"] * 200)
    assert_refused(sched, "fn", lambda: sched.schedule("new", ref, 10.0), "new")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("workers", HUGE),
        ("lease_seconds", HUGE),
        ("lease_seconds", 1e300),  # a float: lease_until would overflow a datetime at the first claim
        ("heartbeat_seconds", HUGE),
        ("busy_timeout_seconds", HUGE),
        ("busy_timeout_seconds", 1e12),
        ("keep_runs", HUGE),
        ("keep_runs", 2**63),
        ("keep_runs_for_seconds", HUGE),
        ("keep_runs_for_seconds", 1e300),
        ("pickup_seconds", HUGE),
        ("max_args_bytes", HUGE),
        ("max_args_bytes", 0),
        ("max_args_bytes", 1.5),
        ("max_args_bytes", "64k"),
        ("instance_id", "x" * 256),
        ("instance_id", "a\x00b"),
        ("instance_id", "a\udc80b"),
        ("instance_id", "line\nbreak"),
        ("instance_id", 7),
        ("instance_id", ""),
    ],
)
def test_constructor_options_out_of_range_refused(tmp_path: Path, option: str, value: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(f"sqlite:///{tmp_path / 'o.db'}", **{option: value})  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == option
    assert not (tmp_path / "o.db").exists()


def test_the_longest_instance_id_is_accepted(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(instance_id="i" * 255)
    assert sched.instance_id == "i" * 255


@pytest.mark.parametrize("limit", [HUGE, 10**20, 2**31, 0, -1, 1.5, True, "5"])
def test_runs_limit_bounded(sched: JobScheduler, limit: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        sched.runs("keep", limit=limit)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "limit"
    assert sched.runs("keep", limit=2**31 - 1) == []


@pytest.mark.parametrize("timeout", [HUGE, 1e300, float("inf"), -1])
def test_wait_timeouts_bounded(sched: JobScheduler, timeout: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        sched.deschedule("keep", wait=True, timeout=timeout)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "timeout"
    with pytest.raises(InvalidJobError) as raised:
        sched.shutdown(timeout=timeout)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "timeout"
    assert [j.job_id for j in sched.jobs()] == ["keep"]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_largest_accepted_values_fit_the_database(engine: str, tmp_path: Path) -> None:
    """What validation lets through, the columns hold (a 255-character instance_id
    used to be accepted and then fail every claim on PostgreSQL)."""
    cron = f"{MINUTES} * * * *"  # 178 characters
    with contextlib.ExitStack() as stack:
        url = f"sqlite:///{tmp_path / 'max.db'}" if engine == "sqlite" else stack.enter_context(pg_schema("limits"))
        clock = FakeClock(1_700_000_000.123457)
        sched = JobScheduler(url, clock=clock, instance_id="i" * 255, max_args_bytes=64 * 1024)
        stack.callback(sched.shutdown)
        longest = "c" * 200
        sched.schedule(longest, jobs.record, None, cron=cron, misfire="catch_up", max_catch_up=2**31 - 1)
        sched.schedule("run", jobs.record, 1.0, args=("run",), kwargs={"k": "x" * (64 * 1024 - 20)})
        sched.start()
        clock.advance(1.0)
        wait_until(lambda: [r.outcome for r in sched.runs("run")] == ["ok"], message="a run on that instance_id")
        assert sched.runs("run")[0].instance_id == "i" * 255
        assert sched.get_job(longest) is not None


@pytest.mark.parametrize("url", [5, None, b"sqlite:///x.db"])
def test_a_url_that_is_not_a_str_is_refused(url: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(url)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "url"


@pytest.mark.parametrize("url", ["a\x00b.db", "sqlite:///tmp/a\x00b.db", "postgresql://u@h\x00/db"])
def test_a_url_with_nul_is_a_store_error_without_a_raw_value_error(url: str) -> None:
    with pytest.raises(StoreError, match="NUL"):
        JobScheduler(url)


@pytest.mark.parametrize("clock", [5, "now", object()])
def test_a_clock_that_is_not_a_clock_is_refused(tmp_path: Path, clock: object) -> None:
    with pytest.raises(InvalidJobError) as raised:
        JobScheduler(f"sqlite:///{tmp_path / 'c.db'}", clock=clock)  # type: ignore[arg-type]  # deliberately wrong
    assert raised.value.argument == "clock"
