"""The fixed pool of worker threads: the only place user code is called.

Threads
-------
``persched-worker-{i}`` threads take won claims from one `SimpleQueue`. The
dispatcher reserved a worker before it claimed (SPEC §2), so a queued claim
never waits for a thread. A worker resolves the target, runs it with no
persched lock held, and passes the outcome to the `complete` callback (which
writes it to the store and queues the next slot). Then it drops its
references to the callable, the arguments and any exception (futures
bpo-16284, trio's ``del fn``), so a run does not keep garbage alive.

A coroutine function is run to completion on an event loop the worker owns
(one per worker thread, made on its first async run and closed when the
worker stops): a run is awaited before the worker takes the next one, so an
async job has the same guarantees as a plain one, and the loop never runs
anything but persched's runs. With an `AwaitableRunner` (set by
`AsyncJobScheduler` to run coroutines on the application's loop) the worker
hands the awaitable to it and blocks until it is done: the run still holds
its worker, so the pool bounds the runs in flight, async ones included.

A worker never dies from user code: everything, `SystemExit` and
`KeyboardInterrupt` included, is caught, logged with its traceback through the
``persched`` logger and recorded as outcome "error". Each worker stops when it
takes ``None`` from the queue.

A job that forks (SPEC §2 "Forks"): the child continues on the worker thread
that called ``fork()``, but the scheduler around it is the parent's. When the
job's code returns or raises in the child, the worker ends that process
(``SystemExit`` keeps its code) instead of going back to a queue that nothing
will ever fill; the parent's worker records the run as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from . import _realtime
from ._store.records import Claim
from ._targets import TargetNotFound, resolve
from ._tracebacks import describe, log_job_failure

__all__ = ["AwaitableRunner", "CompleteCallback", "WorkerPool", "current_run_claim"]

logger = logging.getLogger(__name__)

_current: contextvars.ContextVar[Claim | None] = contextvars.ContextVar("persched_current_run", default=None)

# (claim, outcome "ok" | "error", error text or None); called on the worker thread.
CompleteCallback = Callable[[Claim, str, "str | None"], None]
# Runs an async job's awaitable to completion elsewhere (raises what it raised); called on the worker thread.
AwaitableRunner = Callable[[Any], None]


def current_run_claim() -> Claim | None:
    """The claim of the run executing on this thread, or None."""
    return _current.get()


class WorkerPool:
    """`size` daemon threads running claims handed over by `submit`."""

    def __init__(self, size: int, complete: CompleteCallback, allowed_modules: tuple[str, ...] | None = None) -> None:
        self._complete = complete
        self._allowed_modules = allowed_modules
        self._pid = os.getpid()  # a worker running in another process is in a job's forked child
        self.awaitable_runner: AwaitableRunner | None = None  # None: each worker's own event loop
        self._queue: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"persched-worker-{i}", daemon=True) for i in range(size)
        ]

    def start(self) -> None:
        """Start every worker thread."""
        for thread in self._threads:
            thread.start()

    def submit(self, claim: Claim) -> None:
        """Hand a won claim to a (reserved) worker."""
        self._queue.put(claim)

    def stop(self) -> None:
        """Ask every worker to stop once the queue ahead of it is done."""
        for _ in self._threads:
            self._queue.put(None)

    def join(self, deadline: Callable[[], float | None]) -> bool:
        """Join the workers (never the calling thread); False if one is still alive.

        `deadline()` returns the time left to wait, or None for no limit.
        """
        me = threading.current_thread()
        for thread in self._threads:
            if thread is not me and thread.is_alive():
                thread.join(deadline())
        return not any(t.is_alive() for t in self._threads if t is not me)

    def owns_current_thread(self) -> bool:
        """True when called from one of this pool's workers."""
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
            outcome, error = _execute(claim, self._allowed_modules, loop, self._pid, self.awaitable_runner)
            logger.debug("run %d of %s generation %d ended: %s", claim.run_id, claim.job_id, claim.generation, outcome)
            try:
                self._complete(claim, outcome, error)
            except BaseException as exc:  # noqa: BLE001 - a worker must survive a failed completion
                logger.error(
                    "recording the outcome of %s generation %d failed\n%s",
                    claim.job_id,
                    claim.generation,
                    describe(exc),
                )


def _execute(
    claim: Claim,
    allowed_modules: tuple[str, ...] | None,
    loop: list[asyncio.AbstractEventLoop],
    pid: int,
    awaitable_runner: AwaitableRunner | None = None,
) -> tuple[str, str | None]:
    token = _current.set(claim)
    fn: Callable[..., Any] | None = None
    called = False  # from here on a failure comes out of the job (its traceback is trimmed to it)
    try:
        fn = resolve(claim.target, allowed_modules)
        args = json.loads(claim.args_json)
        kwargs = json.loads(claim.kwargs_json)
        # A row edited by hand may hold JSON of another shape: never call with it
        # (f(*{"a": 1}) would pass "a"); the run records why (SPEC §2).
        if not isinstance(args, list):
            raise TypeError(f"the stored args are not a JSON array: {claim.args_json[:80]!r}")
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"the stored kwargs are not a JSON object: {claim.kwargs_json[:80]!r}")
        called = True
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result) and awaitable_runner is not None:
            awaitable_runner(result)
        elif inspect.isawaitable(result):
            if not loop:
                own = asyncio.new_event_loop()
                # Its timers on the real clock: under freezegun, time.monotonic() is frozen, and
                # an `await asyncio.sleep()` in a job would never end (persched._realtime).
                own.time = _realtime.monotonic  # type: ignore[method-assign]
                loop.append(own)
            loop[0].run_until_complete(_awaited(result))
    except TargetNotFound as exc:
        logger.error(
            "job %s generation %d: target %s cannot be found: %s",
            claim.job_id,
            claim.generation,
            claim.target,
            exc,
        )
        return "error", f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # noqa: BLE001 - SPEC §2: user code never kills a worker
        if os.getpid() != pid:
            _end_forked_child(exc)
        text = describe(exc, user_code=called)  # the job's own frames first (persched._tracebacks)
        log_job_failure(logger, claim.job_id, claim.generation, exc, text)
        del exc
        return "error", text
    finally:
        del fn
        _current.reset(token)
    if os.getpid() != pid:
        _end_forked_child(None)
    return "ok", None


def _end_forked_child(exc: BaseException | None) -> NoReturn:
    """End a job's forked child whose code returned (`exc` None) or raised, as the interpreter would.

    Like multiprocessing's fork start method: flush stdio, then ``os._exit``,
    so that neither persched's worker loop nor the parent's atexit hooks run
    in the child (SPEC §2 "Forks").
    """
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


async def _awaited(awaitable: Any) -> None:  # noqa: ANN401 - whatever an async job returns
    await awaitable
