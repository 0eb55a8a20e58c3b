"""`check_once`, the slot checks of the multi-process tests, judges hand-made run histories."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.multi._cluster import RunRow, check_once

START = datetime(2026, 12, 4, 19, 0, 0, 250_000, tzinfo=timezone.utc)
STEP = timedelta(seconds=0.1)


def _history(coalesced_every: int, slots: int = 100) -> list[RunRow]:
    """One job at 0.1 s; every `coalesced_every`-th slot is covered by the next run, which started late."""
    runs, slot = [], 0
    while slot < slots:
        skip = 1 if slot % coalesced_every == coalesced_every - 1 else 0
        slot += skip
        at = START + slot * STEP
        runs.append(RunRow("j", 1, at, at + STEP * skip + timedelta(milliseconds=3), at + STEP, "ok", "a"))
        slot += 1
    return runs


def test_coalescing_beyond_the_bound_fails_on_an_idle_machine() -> None:
    runs = _history(coalesced_every=2)  # half the slots coalesced, each behind a late start
    with pytest.raises(AssertionError, match="too many slots coalesced"):
        check_once(runs, None, {"j": 0.1}, {"j": START}, max_coalesced_fraction=0.25)


def test_a_starved_machine_widens_the_bound_by_the_share_it_denied() -> None:
    runs = _history(coalesced_every=2)
    report = check_once(runs, None, {"j": 0.1}, {"j": START}, max_coalesced_fraction=0.25, starved=0.5)
    assert report.coalesced == 50
    assert report.allowed == pytest.approx(0.625)
    with pytest.raises(AssertionError, match="too many slots coalesced"):
        check_once(runs, None, {"j": 0.1}, {"j": START}, max_coalesced_fraction=0.25, starved=0.2)
