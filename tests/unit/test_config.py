"""`SchedulerConfig`: the constructor options, checked once into frozen values."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from persched._engine.config import SchedulerConfig
from persched._store import db as _db
from persched._store.options import MAX_BUSY_TIMEOUT_SECONDS, EngineOptions
from persched.clock import Clock
from persched.errors import InvalidJobError
from persched.testing import FakeClock

if TYPE_CHECKING:
    from pathlib import Path

DEFAULTS: dict[str, Any] = {
    "instance_id": None,
    "lease_seconds": 30.0,
    "heartbeat_seconds": None,
    "busy_timeout_seconds": 5.0,
    "synchronous": "FULL",
    "keep_runs": 1000,
    "keep_runs_for_seconds": None,
    "allowed_modules": None,
    "pickup_seconds": 1.0,
    "pickup_check_seconds": 0.1,
    "horizon_seconds": 60.0,
    "max_args_bytes": 64 * 1024,
    "namespace": "default",
}


def checked(**options: Any) -> SchedulerConfig:  # noqa: ANN401 - any option, checked
    return SchedulerConfig.checked("jobs.db", 8, FakeClock(1_700_000_000.0), **{**DEFAULTS, **options})


def test_the_options_become_frozen_values_in_microseconds() -> None:
    config = checked(lease_seconds=3.0, keep_runs_for_seconds=1.5, pickup_seconds=0.25, synchronous="normal")
    durations = (config.lease, config.heartbeat, config.keep_for, config.pickup)
    assert durations == (3_000_000, 1_000_000, 1_500_000, 250_000)  # heartbeat: a third of the lease
    assert config.engine == EngineOptions(5.0, "NORMAL")
    assert isinstance(config.clock, Clock)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 9  # type: ignore[misc]  # deliberately wrong: frozen


def test_the_first_bad_option_is_named() -> None:
    with pytest.raises(InvalidJobError) as raised:
        checked(lease_seconds=0, synchronous="bogus")  # both bad: the earlier one in the constructor's order
    assert raised.value.argument == "lease_seconds"
    with pytest.raises(InvalidJobError) as raised:
        checked(lease_seconds=3.0, heartbeat_seconds=3.0)
    assert raised.value.argument == "heartbeat_seconds"


def test_make_engine_and_the_config_share_one_check(tmp_path: Path) -> None:
    # The scheduler's options reach the engine checked, and are not checked again there.
    with patch.object(EngineOptions, "checked", wraps=EngineOptions.checked) as check:
        engine = _db.open_engine(str(tmp_path / "a.db"), checked().engine)
        engine.dispose()
        check.assert_not_called()
        _db.make_engine(str(tmp_path / "b.db")).dispose()
        check.assert_called_once()
    with pytest.raises(InvalidJobError) as raised:
        _db.make_engine(str(tmp_path / "c.db"), busy_timeout_seconds=MAX_BUSY_TIMEOUT_SECONDS * 2)
    assert raised.value.argument == "busy_timeout_seconds"


@pytest.mark.parametrize("value", [0, -1.5, MAX_BUSY_TIMEOUT_SECONDS * 2, "60"])
def test_migration_timeout_out_of_range_is_named(value: object) -> None:
    assert checked(migration_timeout_seconds=0.25).migration_timeout == 0.25
    with pytest.raises(InvalidJobError) as raised:
        checked(migration_timeout_seconds=value)
    assert raised.value.argument == "migration_timeout_seconds"
