"""The seed of a randomised test: chosen afresh each run, replayable, and named in its failure.

A test that asks for the `seed` fixture gets ``PERSCHED_SEED`` when that is
set, else a new random seed. When the test fails, its failure message (the
report's first line and the ``-q`` summary line) starts with
``[PERSCHED_SEED=N]`` and the report ends with the command that replays it,
so one CI log is enough to replay a failure.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Final

import pytest
from _pytest._code.code import ExceptionRepr

if TYPE_CHECKING:
    from collections.abc import Generator

__all__ = ["SEED_ENV", "name_seed_in_failure", "seed"]

SEED_ENV: Final = "PERSCHED_SEED"
_SEED: Final = pytest.StashKey[int]()


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed: ``PERSCHED_SEED`` if set, else a fresh random one (named in a failure)."""
    value = int(os.environ.get(SEED_ENV, "0")) or random.SystemRandom().randrange(1, 2**31)
    request.node.stash[_SEED] = value
    return value


@pytest.hookimpl(wrapper=True)
def name_seed_in_failure(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """`pytest_runtest_makereport`: a failed test that drew a seed names it in its failure message."""
    report = yield
    value = item.stash.get(_SEED, None)
    if value is None or not report.failed:
        return report
    longrepr = report.longrepr
    if isinstance(longrepr, ExceptionRepr):  # an exception's report (not a skip's tuple or a plain text)
        crash = getattr(longrepr, "reprcrash", None)
        if crash is not None:
            crash.message = f"[{SEED_ENV}={value}] {crash.message}"
        longrepr.addsection("seed", f"replay: {SEED_ENV}={value} python -m pytest -n0 '{item.nodeid}'")
    return report
