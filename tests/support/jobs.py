"""Module-level job targets for the tests, importable by reference.

Each target takes a `key` first and records its call under that key in a
thread-safe registry, together with what `persched.current_run()` said, so a
test can assert on what ran, with which arguments, for which slot.

Blocking targets wait on a per-key `Gate` (threading events), never on time:
the test decides when a run may finish. Every wait is bounded so a broken
scheduler fails a test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from persched import current_run

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from persched import JobScheduler

__all__ = [
    "NOT_CALLABLE",
    "Call",
    "Gate",
    "Holder",
    "block",
    "block_once_then_record",
    "block_then_fail",
    "calls",
    "capture_run",
    "exit_with_systemexit",
    "fail",
    "fail_then_block",
    "follow",
    "gate",
    "make_closure",
    "record",
    "register_scheduler",
    "release_all",
    "reset",
    "shutdown_from_job",
    "timed",
]

GATE_TIMEOUT: Final = 30.0  # real seconds a blocked target waits at most
NOT_CALLABLE: Final = 42  # a module attribute that is not callable


@dataclass(frozen=True)
class Call:
    """One call of a target, as seen from inside the callable."""

    key: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    job_id: str | None
    generation: int | None
    scheduled_for: datetime | None
    thread: str
    start_ns: int
    end_ns: int | None = None


@dataclass
class Gate:
    """Events that let a test hold a blocking target and release it."""

    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    entered: int = 0
    exited: int = 0


_lock = threading.Lock()
_calls: dict[str, list[Call]] = {}
_gates: dict[str, Gate] = {}
_schedulers: dict[str, JobScheduler] = {}
_done: dict[str, threading.Event] = {}


def reset() -> None:
    """Forget every call and release every gate (between tests)."""
    with _lock:
        for g in _gates.values():
            g.release.set()
        _calls.clear()
        _gates.clear()
        _schedulers.clear()
        _done.clear()


def release_all() -> None:
    """Release every gate, so that blocked targets return."""
    with _lock:
        gates = list(_gates.values())
    for g in gates:
        g.release.set()


def calls(key: str) -> list[Call]:
    """Return a copy of the calls recorded under `key`, oldest first."""
    with _lock:
        return list(_calls.get(key, []))


def gate(key: str) -> Gate:
    """Return the gate of `key`, creating it."""
    with _lock:
        return _gates.setdefault(key, Gate())


def done_event(key: str) -> threading.Event:
    """Return the event that `shutdown_from_job` sets when its shutdown returned."""
    with _lock:
        return _done.setdefault(key, threading.Event())


def register_scheduler(key: str, sched: JobScheduler) -> None:
    """Make `sched` reachable from `shutdown_from_job(key)`."""
    with _lock:
        _schedulers[key] = sched


def _record(key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    run = current_run()
    call = Call(
        key=key,
        args=args,
        kwargs=dict(kwargs),
        job_id=None if run is None else run.job_id,
        generation=None if run is None else run.generation,
        scheduled_for=None if run is None else run.scheduled_for,
        thread=threading.current_thread().name,
        start_ns=time.perf_counter_ns(),
    )
    with _lock:
        _calls.setdefault(key, []).append(call)
    return call


def record(key: str, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401  # JSON values
    """Record the call and return."""
    _record(key, args, kwargs)


def capture_run(key: str) -> None:
    """Record the call (with `current_run()`), the same as `record`."""
    _record(key, (), {})


def block(key: str) -> None:
    """Record the call, signal `started`, and wait until the test releases the gate."""
    _record(key, (), {})
    g = gate(key)
    with _lock:
        g.entered += 1
    g.started.set()
    g.release.wait(GATE_TIMEOUT)
    with _lock:
        g.exited += 1
    g.finished.set()


def block_then_fail(key: str) -> None:
    """`block`, then raise `RuntimeError` once the gate is released."""
    block(key)
    raise RuntimeError(f"{key} failed after its gate")


def fail_then_block(key: str) -> None:
    """The first call of `key` raises `RuntimeError` at once; later ones are `block_then_fail`'s."""
    if not calls(key):
        _record(key, (), {})
        raise RuntimeError(f"{key} failed at once")
    block_then_fail(key)


def fail(key: str, message: str) -> None:
    """Record the call and raise `RuntimeError(message)`."""
    _record(key, (message,), {})
    raise RuntimeError(message)


def follow(key: str, script: list[str]) -> None:
    """Record the call; the n-th call of `key` raises `RuntimeError` if ``script[n]`` is "error" (past it: never)."""
    _record(key, (script,), {})
    n = len(calls(key)) - 1  # a job's runs never overlap (overlap "forbid"): this call is the last one
    if n < len(script) and script[n] == "error":
        raise RuntimeError(f"call {n + 1} of {key} fails, as scripted")


def exit_with_systemexit(key: str) -> None:
    """Record the call and raise `SystemExit(3)`."""
    _record(key, (), {})
    raise SystemExit(3)


def shutdown_from_job(key: str) -> None:
    """Call ``shutdown(wait=True)`` on the registered scheduler from inside a run."""
    _record(key, (), {})
    with _lock:
        sched = _schedulers[key]
    sched.shutdown(wait=True)
    done_event(key).set()


def timed(key: str) -> None:
    """Record the call with its real start and end time (for overlap checks)."""
    start = time.perf_counter_ns()
    run = current_run()
    # Simulated work, so that two overlapping runs would really overlap.
    time.sleep(0.001)
    call = Call(
        key=key,
        args=(),
        kwargs={},
        job_id=None if run is None else run.job_id,
        generation=None if run is None else run.generation,
        scheduled_for=None if run is None else run.scheduled_for,
        thread=threading.current_thread().name,
        start_ns=start,
        end_ns=time.perf_counter_ns(),
    )
    with _lock:
        _calls.setdefault(key, []).append(call)


def block_once_then_record(marker: str, log: str) -> None:
    """For the SIGKILL test: the first call writes `marker` and hangs; later calls log.

    The first call runs in a child process that the test kills; later calls run
    in the restarted scheduler, append their slot to `log` and return.
    """
    run = current_run()
    slot = "" if run is None else run.scheduled_for.isoformat()
    marker_path = Path(marker)
    if not marker_path.exists():
        # Written whole, then renamed: the parent never reads a half-written marker.
        partial = marker_path.with_suffix(".partial")
        partial.write_text(slot)
        partial.replace(marker_path)
        # Stands for a long job; the parent SIGKILLs this process meanwhile.
        time.sleep(3600)
        return
    with Path(log).open("a") as f:
        f.write(slot + "\n")


class Holder:
    """Static and class methods are reachable by qualified name; bound methods are not."""

    @staticmethod
    def static_target(key: str) -> None:
        """Record the call."""
        _record(key, (), {})

    @classmethod
    def class_target(cls, key: str) -> None:
        """Record the call."""
        _record(key, (), {})

    def method(self, key: str) -> None:
        """Record the call (refused when passed bound to an instance)."""
        _record(key, (), {})


def make_closure() -> Callable[[str], None]:
    """Return a closure, which cannot be found again by reference."""
    captured = "closure"

    def inner(key: str) -> None:
        _record(key, (captured,), {})

    return inner
