"""The public API, pinned: the names each public module exports, and where each resolves from.

A name added, removed or renamed fails here first; change the lists with the
CHANGELOG. Private modules may move (docs/architecture.md): only these names
and the modules that export them are the contract.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

PUBLIC: dict[str, list[str]] = {
    "persched": [
        "AsyncJobScheduler",
        "DeclareResult",
        "Event",
        "EventKind",
        "Job",
        "JobScheduler",
        "JobSpec",
        "JobState",
        "Run",
        "RunContext",
        "__version__",
        "current_run",
    ],
    "persched.testing": ["FakeClock", "FrozenTimeClock", "ShiftedClock"],
    "persched.metrics": ["DURATION_BUCKETS", "LATENESS_BUCKETS", "SchedulerMetrics", "serve"],
    "persched.clock": ["Clock", "SecondsClock", "SystemClock", "exact_clock", "tells_real_time"],
    "persched.web": ["AwaitingDatabase", "MESSAGES", "WebApp", "dashboard"],
    "persched.integrations.flask": ["Persched"],
    "persched.integrations.asgi": ["Dashboard", "dashboard", "lifespan"],
    "persched.cli": ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main"],
}
# errors.py has no __all__: its public names are the classes it defines.
ERRORS = [
    "InvalidJobError",
    "JobNotFoundError",
    "PerschedError",
    "RunStopped",
    "SchedulerStateError",
    "SchemaVersionError",
    "StoreError",
]


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_exported_names(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == PUBLIC[module]
    for name in imported.__all__:
        assert getattr(imported, name) is not None, name  # each resolves (persched's lazily, PEP 562)


def test_the_errors() -> None:
    errors = importlib.import_module("persched.errors")
    defined = sorted(
        name
        for name, value in vars(errors).items()
        if not name.startswith("_") and inspect.isclass(value) and value.__module__ == errors.__name__
    )
    assert defined == ERRORS
    assert all(issubclass(getattr(errors, name), errors.PerschedError) for name in ERRORS)


def test_dir_lists_the_lazy_names() -> None:
    persched = importlib.import_module("persched")
    assert set(PUBLIC["persched"]) <= set(dir(persched))


FRAMEWORKS = ("flask", "werkzeug", "click", "django", "starlette", "fastapi")


def test_importing_persched_imports_no_framework() -> None:
    """The integrations are extras: persched and its public modules import none of the frameworks."""
    code = (
        "import sys, persched, persched.web, persched.cli, persched.metrics, persched.testing, persched.integrations\n"
        "persched.JobScheduler, persched.AsyncJobScheduler\n"
        f"print(sorted(name for name in sys.modules if name.split('.')[0] in {FRAMEWORKS!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
