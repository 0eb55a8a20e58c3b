"""The fixed pool of worker threads: the only place user code is called.

``persched-worker-{i}`` threads take won claims from one `SimpleQueue`; each was
reserved before its claim, so a claim never waits for a thread. A worker runs the
target with no persched lock held, passes the outcome to the `complete` callback,
and drops its references to the callable, its arguments and any exception
(futures bpo-16284, trio's ``del fn``).

A worker never dies from user code: everything, `SystemExit` and
`KeyboardInterrupt` included, is recorded as "error". A coroutine runs on the
worker's own loop through `awaited`, which keeps those two inside the task
(asyncio would re-raise them out of the loop). With an `AwaitableRunner` the
worker calls `release`, hands the awaitable over and goes back to the queue; the
runner calls `finished` from a thread of its own, never from the loop. A job that
forks ends its child on the worker (docs/reference/behaviour.md, "Forks").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from .. import _realtime
from .._model.targets import TargetNotFound, resolve
from .._model.terms import DEFAULT_NAMESPACE
from .._store.records import Claim
from ..errors import RunStopped
from .context import ACTIVE_RUN, ActiveRun, StopSignal, stop_text
from .processes import ProcessRun, run_in_process
from .stops import RunStops
from .tracebacks import describe, log_job_failure

__all__ = [
    "AwaitableRunner",
    "CompleteCallback",
    "EscapedError",
    "Finished",
    "WorkerPool",
    "awaited",
    "current_run_claim",
    "set_current_run_claim",
]

logger = logging.getLogger(__name__)


# (claim, outcome "ok" | "error", error text or None, whether the run still held its worker);
# called on the worker thread, or on the awaitable runner's.
CompleteCallback = Callable[[Claim, str, "str | None", bool], None]
# A run handed to an AwaitableRunner ended: (its claim, as the runner ran it; what it raised or None).
Finished = Callable[[Claim, "BaseException | None"], None]


class AwaitableRunner(Protocol):
    """Runs async jobs' awaitables somewhere else than on the workers (`persched._interfaces.async_front`)."""

    def start(self, claim: Claim, awaitable: Any, finished: Finished) -> None:  # noqa: ANN401 - a job's result
        """Start `awaitable` (on a worker thread; returns at once) and call `finished` once it ended,
        on a thread of the runner's; raise if it cannot be started (nothing is called then)."""

    def stop(self) -> None:
        """No more runs come: end once the ones started have finished."""

    def join(self, timeout: float | None) -> bool:
        """Wait for the runs started to finish (up to `timeout`); True once they have."""


class EscapedError(Exception):
    """`SystemExit` or `KeyboardInterrupt` raised by an async job, carried out of its task as an Exception."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"{type(original).__name__} raised by an async job")
        self.original = original


def current_run_claim() -> Claim | None:
    """The claim of the run executing on this thread, or None."""
    active = ACTIVE_RUN.get()
    return None if active is None else active.claim


def set_current_run_claim(claim: Claim) -> None:
    """Make `claim` what `current_run()` returns in this context (an async job's task, as the runner runs it)."""
    active = ACTIVE_RUN.get()
    ACTIVE_RUN.set(ActiveRun(claim, DEFAULT_NAMESPACE) if active is None else dataclasses.replace(active, claim=claim))


async def awaited(awaitable: Any) -> None:  # noqa: ANN401 - whatever an async job returns
    """Await an async job's awaitable; a SystemExit or KeyboardInterrupt leaves as `EscapedError`."""
    try:
        await awaitable
    except (SystemExit, KeyboardInterrupt) as exc:
        raise EscapedError(exc) from None


def unwrapped(exc: BaseException) -> BaseException:
    """What the job raised: `exc`, or the SystemExit or KeyboardInterrupt an `EscapedError` carried."""
    return exc.original if isinstance(exc, EscapedError) else exc


class WorkerPool:
    """`size` daemon threads running claims handed over by `submit`."""

    def __init__(
        self,
        size: int,
        complete: CompleteCallback,
        allowed_modules: tuple[str, ...] | None = None,
        release: Callable[[Claim], None] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        self._complete = complete
        self._namespace = namespace  # what a run's RunContext says
        self.stops = RunStops()  # the runs in flight, each with its stop request
        self._release = release  # a run handed to the awaitable runner gives its worker back
        self._allowed_modules = allowed_modules
        self._pid = os.getpid()  # a worker running in another process is in a job's forked child
        self.awaitable_runner: AwaitableRunner | None = None  # None: each worker's own event loop
        self._queue: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"persched-worker-{i}", daemon=True) for i in range(size)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, claim: Claim) -> None:
        """Hand a won claim to a (reserved) worker."""
        self._queue.put(claim)

    def stop(self) -> None:
        """Ask every worker to stop once the queue ahead of it is done (and the awaitable runner once its runs are)."""
        for _ in self._threads:
            self._queue.put(None)
        if self.awaitable_runner is not None:
            self.awaitable_runner.stop()

    def join(self, deadline: Callable[[], float | None]) -> bool:
        """Join the workers (never the calling thread) and the runner's runs; False if one is still going."""
        me = threading.current_thread()
        for thread in self._threads:
            if thread is not me and thread.is_alive():
                thread.join(deadline())
        workers_done = not any(t.is_alive() for t in self._threads if t is not me)
        runner = self.awaitable_runner
        return runner.join(deadline()) and workers_done if runner is not None else workers_done

    def owns_current_thread(self) -> bool:
        return threading.current_thread() in self._threads

    def _loop(self) -> None:
        loop: list[asyncio.AbstractEventLoop] = []  # this worker's event loop, made on first use
        try:
            self._run_claims(loop)
        finally:
            if loop:
                loop[0].close()

    def _run_claims(self, loop: list[asyncio.AbstractEventLoop]) -> None:
        while (claim := self._queue.get()) is not None:
            # One line per run at DEBUG, as APScheduler users expect ("Running job ...").
            logger.debug(
                "run %d of %s generation %d started%s",
                claim.run_id,
                claim.job_id,
                claim.generation,
                " (run-now)" if claim.run_now else "",
            )
            active = ActiveRun(claim, self._namespace, self.stops.started(claim))
            ended = _execute(active, self._allowed_modules, loop, self._pid, self._hand_over)
            del active
            if ended is not None:  # None: handed to the awaitable runner, which calls _finished_elsewhere
                self._report(claim, *ended)

    def _hand_over(self, claim: Claim, awaitable: Any) -> bool:  # noqa: ANN401 - a job's result
        """On a worker: give `awaitable` to the awaitable runner, if there is one (False: run it here)."""
        runner = self.awaitable_runner
        if runner is None:
            return False
        if self._release is not None:
            self._release(claim)  # before start(): the run may finish, and report, at once
        try:
            runner.start(claim, awaitable, self._finished_elsewhere)
        except BaseException as exc:  # noqa: BLE001 - its worker was given back: it ended elsewhere
            self._finished_elsewhere(claim, exc)
            del exc
        return True

    def _finished_elsewhere(self, claim: Claim, exc: BaseException | None) -> None:
        """On the awaitable runner's thread: a run it was handed ended (`exc`: what it raised, or None)."""
        if exc is None:
            self._report(claim, "ok", None, held_worker=False)
        else:
            self._report(claim, *_failed(claim, unwrapped(exc), self.stops.signal_of(claim)), held_worker=False)
        del exc

    def _report(self, claim: Claim, outcome: str, error: str | None, *, held_worker: bool = True) -> None:
        self.stops.ended(claim)
        logger.debug("run %d of %s generation %d ended: %s", claim.run_id, claim.job_id, claim.generation, outcome)
        try:
            self._complete(claim, outcome, error, held_worker)
        except BaseException as exc:  # noqa: BLE001 - a worker must survive a failed completion
            logger.error(
                "recording the outcome of %s generation %d failed\n%s",
                claim.job_id,
                claim.generation,
                describe(exc),
            )


def _execute(
    active: ActiveRun,
    allowed_modules: tuple[str, ...] | None,
    loop: list[asyncio.AbstractEventLoop],
    pid: int,
    hand_over: Callable[[Claim, Any], bool],
) -> tuple[str, str | None] | None:
    """Run `active`'s target; return (outcome, error text), or None once `hand_over` took its awaitable."""
    claim = active.claim
    token = ACTIVE_RUN.set(active)
    if claim.run_policy.executor == "process":
        try:
            outcome, error = run_in_process(
                ProcessRun(claim, active.namespace, allowed_modules, claim.run_policy), active.stop
            )
        finally:
            ACTIVE_RUN.reset(token)
        if outcome != "ok":  # as for a thread: an error at ERROR with its text, a stop at WARNING
            level = logging.WARNING if outcome == "stopped" else logging.ERROR
            logger.log(
                level,
                "job %s generation %d (executor='process') %s\n%s",
                claim.job_id,
                claim.generation,
                outcome,
                error,
            )
        return outcome, error
    fn: Callable[..., Any] | None = None
    called = False  # from here on a failure comes out of the job (its traceback is trimmed to it)
    try:
        fn = resolve(claim.target, allowed_modules)
        args = json.loads(claim.args_json)
        kwargs = json.loads(claim.kwargs_json)
        # A row edited by hand may hold JSON of another shape: never call with it
        # (f(*{"a": 1}) would pass "a"); the run records why.
        if not isinstance(args, list):
            raise TypeError(f"the stored args are not a JSON array: {claim.args_json[:80]!r}")
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"the stored kwargs are not a JSON object: {claim.kwargs_json[:80]!r}")
        called = True
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            if hand_over(claim, result):
                return None
            if not loop:
                own = asyncio.new_event_loop()
                # Its timers on the real clock: under freezegun, time.monotonic() is frozen, and
                # an `await asyncio.sleep()` in a job would never end (persched._realtime).
                own.time = _realtime.monotonic  # type: ignore[method-assign]
                loop.append(own)
            task = loop[0].create_task(awaited(result))
            active.stop.on_request(_cancelling(loop[0], task))
            loop[0].run_until_complete(task)
            del task
    except TargetNotFound as exc:
        logger.error(
            "job %s generation %d: target %s cannot be found: %s",
            claim.job_id,
            claim.generation,
            claim.target,
            exc,
        )
        return "error", f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # noqa: BLE001 - user code never kills a worker
        exc = unwrapped(exc)
        if os.getpid() != pid:
            _end_forked_child(exc)
        ended = _failed(claim, exc, active.stop, user_code=called)
        del exc
        return ended
    finally:
        del fn
        ACTIVE_RUN.reset(token)
    if os.getpid() != pid:
        _end_forked_child(None)
    return "ok", None


def _cancelling(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> Callable[[], None]:
    """What a stop does to an async job on a worker's loop: cancel its task, from any thread."""

    def cancel() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the run is over
            loop.call_soon_threadsafe(task.cancel)

    return cancel


def _failed(
    claim: Claim, exc: BaseException, stop: StopSignal | None, *, user_code: bool = True
) -> tuple[str, str | None]:
    """The outcome and error text of a run that raised `exc` (docs/reference/behaviour.md, "Stopping a run")."""
    reason = None if stop is None else stop.reason
    if isinstance(exc, RunStopped) or (reason is not None and isinstance(exc, asyncio.CancelledError)):
        text = describe(exc, user_code=user_code)
        why = stop_text(reason or (exc.reason if isinstance(exc, RunStopped) else "requested"))
        # Asked for, so no failure of the job's: one WARNING line, the traceback in the record.
        logger.warning("job %s generation %d %s", claim.job_id, claim.generation, why)
        return "stopped", text if reason is None else f"{why}\n{text}"
    return "error", _failure_text(claim, exc, user_code=user_code)


def _failure_text(claim: Claim, exc: BaseException, *, user_code: bool = True) -> str:
    """Log what a run raised, with its traceback; return the text its record keeps."""
    text = describe(exc, user_code=user_code)
    log_job_failure(logger, claim.job_id, claim.generation, exc, text)
    return text


def _end_forked_child(exc: BaseException | None) -> NoReturn:
    """End a job's forked child as the interpreter would: flush stdio, then ``os._exit`` (no atexit hooks)."""
    code = 0
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)  # noqa: T201 - what the interpreter prints for SystemExit("text")
            code = 1
    elif exc is not None:
        traceback.print_exception(exc)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream must not keep the child alive
            stream.flush()
    os._exit(code)
