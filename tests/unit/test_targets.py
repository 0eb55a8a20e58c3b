"""`persched._model.targets`: callables <-> ``"module:qualname"``.

A reference is accepted only if importing it again gives back the very same
callable; everything else is refused at `schedule()` time with a message that
says why and what to pass instead.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pytest

from persched._model.targets import TargetNotFound, TargetRefused, normalize_allowed, reference_of, resolve
from persched.errors import InvalidJobError
from tests.support import jobs, race_jobs

if TYPE_CHECKING:
    from collections.abc import Callable


def local_function() -> Callable[[], None]:
    def inner() -> None:
        return None

    return inner


@pytest.mark.parametrize(
    ("fn", "reference"),
    [
        (jobs.record, "tests.support.jobs:record"),
        (race_jobs.noop, "tests.support.race_jobs:noop"),
        (jobs.Holder.static_target, "tests.support.jobs:Holder.static_target"),
        (jobs.Holder.class_target, "tests.support.jobs:Holder.class_target"),
        ("tests.support.jobs:record", "tests.support.jobs:record"),
        ("tests.support.jobs:Holder.static_target", "tests.support.jobs:Holder.static_target"),
    ],
    ids=["function", "other-module", "staticmethod", "classmethod", "string", "string-nested"],
)
def test_accepted_references_round_trip(fn: object, reference: str) -> None:
    assert reference_of(fn) == reference
    found = resolve(reference)
    if isinstance(fn, str):
        assert callable(found)
    else:
        assert found == fn


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (lambda: None, "lambda"),
        (local_function(), "inside a function"),
        (jobs.Holder().method, "bound to an instance"),
        (functools.partial(jobs.record, "k"), "no module and qualified name"),
        (jobs.NOT_CALLABLE, "not callable"),
        (None, "not callable"),
        ("tests.support.jobs", "not a reference"),
        ("tests.support.jobs:", "not a reference"),
        ("tests support:record", "not a reference"),
        ("tests.support.no_such_module:f", "cannot import"),
        ("tests.support.jobs:no_such_function", "no attribute"),
        ("tests.support.jobs:NOT_CALLABLE", "not callable"),
    ],
    ids=[
        "lambda",
        "closure",
        "bound-method",
        "partial",
        "int",
        "none",
        "module-only",
        "empty-qualname",
        "space",
        "missing-module",
        "missing-attribute",
        "non-callable-attribute",
    ],
)
def test_refused_with_a_reason(fn: object, why: str) -> None:
    with pytest.raises(InvalidJobError, match=why) as info:
        reference_of(fn)
    assert info.value.argument == "fn"
    assert "fn" in str(info.value)


def test_a_main_module_function_is_refused() -> None:
    def fake() -> None:
        return None

    fake.__module__ = "__main__"
    fake.__qualname__ = "fake"
    with pytest.raises(InvalidJobError, match="__main__"):
        reference_of(fake)


def test_a_callable_shadowed_under_its_name_is_refused() -> None:
    """A function whose module attribute now names another object is not found again."""

    def impostor(key: str) -> None:
        return None

    impostor.__module__ = "tests.support.jobs"
    impostor.__qualname__ = "record"
    with pytest.raises(InvalidJobError, match="another object"):
        reference_of(impostor)


def test_resolve_errors() -> None:
    with pytest.raises(TargetNotFound, match="cannot import"):
        resolve("tests.support.no_such_module:f")
    with pytest.raises(TargetNotFound, match="no attribute"):
        resolve("tests.support.jobs:Holder.nope")
    with pytest.raises(TargetNotFound, match="not callable"):
        resolve("tests.support.jobs:NOT_CALLABLE")


def test_allowed_modules_refuse_before_importing() -> None:
    allowed = normalize_allowed(["tests.support"])
    assert allowed == ("tests.support",)
    assert reference_of(jobs.record, allowed) == "tests.support.jobs:record"
    with pytest.raises(TargetRefused):
        resolve("os:system", allowed)
    with pytest.raises(InvalidJobError, match="allowed_modules"):
        reference_of("os:getcwd", allowed)
    # A prefix allows its sub-modules only, never a longer name.
    assert resolve("tests.support.jobs:record", normalize_allowed("tests")) is jobs.record
    with pytest.raises(TargetRefused):
        resolve("tests.support.jobs:record", normalize_allowed("tests.supp"))


@pytest.mark.parametrize("bad", [[], [""], [3], ["."]])
def test_allowed_modules_validation(bad: object) -> None:
    with pytest.raises(InvalidJobError, match="allowed_modules"):
        normalize_allowed(bad)  # type: ignore[arg-type]  # refusing bad input is the point
