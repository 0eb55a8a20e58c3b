# ruff: noqa: ANN401 - fuzzed arguments are deliberately of any type
"""Fuzzed public input: every argument of schedule / deschedule / get_job / runs / JobScheduler.

Allowed outcomes: success, or a `PerschedError` (InvalidJobError, ...);
never another exception, and never a partial write: a refused call leaves
``jobs()`` exactly as it was. The scheduler is not started (schedule() and
deschedule() work before start()), so each example is one transaction.
"""

from __future__ import annotations

import contextlib
import math
from datetime import timezone
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persched import JobScheduler
from persched.errors import InvalidJobError, PerschedError, StoreError
from tests.proof._settings import fuzz_settings
from tests.support import jobs as support_jobs
from tests.support.helpers import finished_runs, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.conftest import SchedulerFactory


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


# Shapes that are wrong, not only odd values: numbers beyond any
# float, nesting past the recursion limit, strings no database can store, sizes past
# max_args_bytes. Each must be InvalidJobError naming its argument, never a raw
# OverflowError / RecursionError / UnicodeEncodeError, nor a StoreError.
huge_ints = st.integers(min_value=2**1024, max_value=10**500) | st.just(-(10**400)) | st.just(10**5000)
surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
with_surrogate = st.builds(lambda a, b: f"{a}{b}", st.text(max_size=4), surrogates)
with_nul = st.builds(lambda a: f"{a}\x00", st.text(max_size=4))
deep = st.builds(_nested, st.integers(min_value=90, max_value=5_000))
oversize = st.just("x" * (64 * 1024 + 1))
wrong_shapes = huge_ints | with_surrogate | with_nul | deep | oversize
json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_like = st.recursive(
    json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=6
)
anything = (
    json_like
    | st.tuples(json_leaf)
    | st.sets(st.integers(), max_size=2)
    | st.binary(max_size=4)
    | st.dictionaries(st.integers(), json_leaf, max_size=2)
    | st.just(object())
    | st.just(float("nan"))
    | wrong_shapes
    | st.lists(wrong_shapes, max_size=2)
    | st.dictionaries(with_surrogate | st.text(max_size=3), wrong_shapes, max_size=2)
)

job_ids = st.text(max_size=210) | st.sampled_from(["a", "x" * 200, "x" * 201, "\x00", "\x7f", "é", ""]) | anything
targets = (
    st.sampled_from(
        [
            "tests.support.proof_jobs:noop",
            "tests.support.jobs:record",
            "tests.support.jobs:NOT_CALLABLE",
            "tests.support.jobs:Holder.static_target",
            "tests.support.jobs:Holder.method",
            "nope.nope:f",
            "os:system",
            ":",
            "a:b:c",
            "tests.support.jobs",
            support_jobs.record,
            support_jobs.make_closure(),
            support_jobs.Holder().method,
            support_jobs.Holder.class_target,
            print,
            len,
            lambda: None,
        ]
    )
    | anything
    | st.text(max_size=30)
)
seconds = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, True, False, 0.5, 1e-3, 315_576_000, 315_576_001, "1", None, 1e308])
    | huge_ints
)
positive_ints = (
    st.integers(min_value=-3, max_value=2**40)
    | st.floats()
    | st.sampled_from([True, "3", None, 2**31, 2**63, 10**20])
    | huge_ints
)


@pytest.fixture
def sched(tmp_path: Path) -> Any:
    s = JobScheduler(f"sqlite:///{tmp_path / 'fuzz.db'}", synchronous="OFF")
    s.schedule("existing", "tests.support.proof_jobs:noop", 5.0)
    yield s
    s.shutdown()


def _jobs(sched: JobScheduler) -> list[Any]:
    return [j.model_dump() for j in sched.jobs()]


@fuzz_settings(300)
@given(job_id=job_ids, fn=targets, interval=seconds, args=anything, kwargs=anything, start_in=seconds)
def test_schedule_succeeds_or_refuses_cleanly(
    sched: JobScheduler,
    job_id: Any,
    fn: Any,
    interval: Any,
    args: Any,
    kwargs: Any,
    start_in: Any,
) -> None:
    before = _jobs(sched)
    try:
        job = sched.schedule(job_id, fn, interval, args=args, kwargs=kwargs, start_in=start_in)
    except InvalidJobError:  # bad input is InvalidJobError, never a StoreError
        assert _jobs(sched) == before, "a refused schedule() wrote something"
        return
    assert job.job_id == job_id
    assert job.interval_seconds is not None
    assert math.isfinite(job.interval_seconds)
    assert job.interval_seconds > 0
    assert sched.get_job(job_id) == job
    sched.deschedule(job_id)


@fuzz_settings(200)
@given(job_id=job_ids, wait=anything, timeout=seconds, limit=positive_ints)
def test_deschedule_get_job_runs_succeed_or_refuse_cleanly(
    sched: JobScheduler,
    job_id: Any,
    wait: Any,
    timeout: Any,
    limit: Any,
) -> None:
    before = _jobs(sched)
    for call in (
        lambda: sched.get_job(job_id),
        lambda: sched.runs(job_id, limit=limit),
        lambda: sched.runs(limit=limit),
        lambda: sched.deschedule(job_id, wait=bool(wait), timeout=timeout if wait else None),
    ):
        with contextlib.suppress(PerschedError):
            call()
    after = _jobs(sched)
    if job_id != "existing":
        assert after == before


@fuzz_settings(150)
@given(
    workers=positive_ints,
    instance_id=st.none() | st.text(max_size=5) | st.just("x" * 256) | anything,
    lease=seconds,
    heartbeat=st.none() | seconds,
    busy=seconds,
    synchronous=st.sampled_from(["FULL", "NORMAL", "OFF", "EXTRA", "full", "bogus", "", "FULL; DROP TABLE x"])
    | anything,
    keep_runs=st.none() | positive_ints,
    keep_for=st.none() | seconds,
    max_args=positive_ints,
    pickup=seconds,
    allowed=st.none() | st.lists(st.text(max_size=6) | json_leaf, max_size=3) | st.text(max_size=6),  # see below
    url=st.sampled_from(["", "   ", "mysql://x/y", "postgresql+pg8000://x/y", "sqlite+foo:///x", "http://"])
    | st.text(max_size=10),
)
def test_constructor_succeeds_or_refuses_cleanly(
    tmp_path: Path,
    workers: Any,
    instance_id: Any,
    lease: Any,
    heartbeat: Any,
    busy: Any,
    synchronous: Any,
    keep_runs: Any,
    keep_for: Any,
    max_args: Any,
    pickup: Any,
    allowed: Any,
    url: str,
) -> None:
    good = f"sqlite:///{tmp_path / 'ctor.db'}"
    for target_url in (good, url if "://" in url or not url.strip() else good):
        try:
            s = JobScheduler(
                target_url,
                workers=workers,
                instance_id=instance_id,
                lease_seconds=lease,
                heartbeat_seconds=heartbeat,
                busy_timeout_seconds=busy,
                synchronous=synchronous,
                keep_runs=keep_runs,
                keep_runs_for_seconds=keep_for,
                max_args_bytes=max_args,
                pickup_seconds=pickup,
                allowed_modules=allowed,
            )
        except PerschedError:
            continue
        s.shutdown()


cron_like = (
    st.sampled_from(["* * * * *", "0 3 * * *", "*/5 * * * * *", "61 * * * *", ""])
    | st.text(alphabet="0123456789*/,- ", max_size=220)
    | wrong_shapes
    | st.none()
)
zones = st.sampled_from(["UTC", "Europe/Paris", "Mars/Base", "", "../etc/passwd"]) | wrong_shapes | st.text(max_size=70)
instants = st.none() | st.datetimes(timezones=st.just(timezone.utc)) | st.datetimes() | wrong_shapes


@fuzz_settings(200)
@given(
    interval=st.none() | seconds,
    cron=cron_like,
    zone=zones,
    misfire=st.sampled_from(["coalesce", "skip", "catch_up"]) | anything,
    max_catch_up=st.none() | positive_ints,
    grace=seconds,
    jitter=seconds,
    start_at=instants,
    end_at=instants,
    runtime=st.none() | seconds,
    on_overrun=st.sampled_from(["warn", "stop"]) | anything,
    executor=st.sampled_from(["thread", "process"]) | anything,
    stop_grace=seconds,
)
def test_schedule_policies_succeed_or_refuse_cleanly(
    sched: JobScheduler,
    interval: Any,
    cron: Any,
    zone: Any,
    misfire: Any,
    max_catch_up: Any,
    grace: Any,
    jitter: Any,
    start_at: Any,
    end_at: Any,
    runtime: Any,
    on_overrun: Any,
    executor: Any,
    stop_grace: Any,
) -> None:
    before = _jobs(sched)
    try:
        sched.schedule(
            "policies",
            "tests.support.proof_jobs:noop",
            interval,
            cron=cron,
            timezone=zone,
            misfire=misfire,
            max_catch_up=max_catch_up,
            grace_seconds=grace,
            jitter_seconds=jitter,
            start_at=start_at,
            end_at=end_at,
            max_runtime_seconds=runtime,
            on_overrun=on_overrun,
            executor=executor,
            stop_grace_seconds=stop_grace,
        )
    except InvalidJobError:
        assert _jobs(sched) == before, "a refused schedule() wrote something"
        return
    sched.deschedule("policies")


@fuzz_settings(150)
@given(job_id=job_ids)
def test_pause_resume_run_now_cancel_succeed_or_refuse_cleanly(sched: JobScheduler, job_id: Any) -> None:
    errors: list[PerschedError] = []
    for call in (sched.pause, sched.resume, sched.run_now, sched.cancel):
        with contextlib.suppress(PerschedError):
            try:
                call(job_id)
            except PerschedError as exc:
                errors.append(exc)
                raise
    # Bad input: InvalidJobError naming job_id; an id not there: JobNotFoundError; a state
    # refusal (run_now of a paused job) is SchedulerStateError; never a StoreError.
    assert not [e for e in errors if isinstance(e, StoreError)], errors
    assert all(e.argument == "job_id" for e in errors if isinstance(e, InvalidJobError)), errors
    if job_id == "existing":
        sched.resume("existing")


# --- regressions found by the fuzzer -----------------------------------------------------------


@pytest.mark.parametrize("interval", [1e-7, 5e-324])
def test_a_sub_microsecond_interval_never_runs_a_slot_twice(make_scheduler: SchedulerFactory, interval: float) -> None:
    """Defect: interval_seconds below the store's microsecond resolution is accepted.

    `_triggers.interval_trigger` rounds slots to the microsecond, so with 1e-7 the
    "next" slot equals the current one: the same (job, generation, slot) is
    claimed again and again (and 5e-324 overflows `math.floor` in the claim
    once time has moved). Either schedule() refuses it with InvalidJobError,
    or every run stands for a distinct slot.
    """
    sched = make_scheduler(start=True)
    try:
        sched.schedule("tiny", "tests.support.jobs:record", interval, args=["tiny"], start_in=0)
    except PerschedError:
        return  # refusing it is a fix
    wait_until(lambda: len(finished_runs(sched, "tiny")) >= 1, message="first run")
    make_scheduler.clock.advance(1.0)
    wait_until(lambda: len(finished_runs(sched, "tiny")) >= 2, timeout=3.0, message="a second run after 1 s")
    slots = [r.scheduled_for for r in finished_runs(sched, "tiny")]
    assert len(slots) == len(set(slots)), f"slots claimed twice: {sorted(slots)[:5]}..."


@pytest.mark.parametrize("allowed", [False, 0, 3.5, object()])
def test_a_non_iterable_allowed_modules_is_an_invalid_job_error(tmp_path: Path, allowed: object) -> None:
    """Defect (found by the constructor fuzzer): ``allowed_modules=False`` raises TypeError.

    `_targets.normalize_allowed` calls ``tuple(allowed)`` on anything that is
    not a str, so a non-iterable escapes as ``TypeError: 'bool' object is not
    iterable`` instead of InvalidJobError("allowed_modules", ...).
    """
    with pytest.raises(PerschedError):
        JobScheduler(f"sqlite:///{tmp_path / 'a.db'}", allowed_modules=allowed)  # type: ignore[arg-type]
