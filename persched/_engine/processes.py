"""``executor="process"``: a run's callable in a child process, which a stop can end.

`run_in_process` blocks the worker that holds the run until the child ended, so
the worker, the claim and the completion are those of a thread job. The child is
started by "forkserver" (else "spawn"), never by a fork of the scheduler, whose
other threads may hold locks. The worker waits on the child's report, its exit
and a waker pipe that the run's `StopSignal` writes to from whichever thread
asks. On a stop it sends the reason, SIGTERM, and after ``stop_grace_seconds`` of
real time (a test clock does not govern a real process) SIGKILL. What is recorded:
docs/reference/behaviour.md, "Stopping a run".
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.forkserver
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Final

from .._model.instant import US_PER_SECOND
from .context import stop_text

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import BaseContext

    from .._model.policy import RunPolicy
    from .._store.records import Claim
    from .context import StopSignal

__all__ = ["START_METHOD", "ProcessRun", "run_in_process"]

# "forkserver" where the platform has it (Linux, macOS), else "spawn" (Windows): never "fork".
START_METHOD: Final = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


@dataclass(frozen=True)
class ProcessRun:
    """What a child needs to run a claim: it travels to the child as JSON."""

    claim: Claim
    namespace: str
    allowed_modules: tuple[str, ...] | None
    policy: RunPolicy  # its stop_grace: after SIGTERM, how long before SIGKILL

    def payload(self) -> str:
        claim = self.claim
        return json.dumps(
            {
                "target": claim.target,
                "args_json": claim.args_json,
                "kwargs_json": claim.kwargs_json,
                "job_id": claim.job_id,
                "generation": claim.generation,
                "scheduled_for": claim.scheduled_for,
                "started_at": claim.started_at,
                "run_id": claim.run_id,
                "run_now": claim.run_now,
                "attempt": claim.attempt,
                "namespace": self.namespace,
                "allowed_modules": None if self.allowed_modules is None else list(self.allowed_modules),
            }
        )


_CHILD: Final = "persched._engine.child"
_preload_lock = threading.Lock()


def _context() -> BaseContext:
    """The start method's context; the forkserver imports the child's module once, so each child starts warm."""
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        with _preload_lock:
            # Added to the application's own preload list, never in its place (read from the forkserver,
            # which has no public getter); it applies when the forkserver starts, if it has not yet.
            preload = list(getattr(multiprocessing.forkserver._forkserver, "_preload_modules", []))
            if _CHILD not in preload:
                context.set_forkserver_preload([*preload, _CHILD])
    return context


def run_in_process(run: ProcessRun, stop: StopSignal) -> tuple[str, str | None]:
    """Run `run` in a child process, blocking until it ends; a `stop` request ends it. Return (outcome, error)."""
    from .child import main as child_main  # it imports the workers' module, which imports this one

    context = _context()
    conn, child_conn = context.Pipe(duplex=True)
    wake_reader, wake_writer = context.Pipe(duplex=False)
    process = context.Process(  # type: ignore[attr-defined]  # every context has Process
        target=child_main,
        args=(child_conn, run.payload()),
        name=f"persched-run-{run.claim.job_id}",
    )
    try:
        process.start()
    except BaseException as exc:
        for end in (conn, child_conn, wake_reader, wake_writer):
            end.close()
        if not isinstance(exc, Exception):
            raise
        # Recorded like any run that failed, and the worker thread lives on (a main module without the
        # `if __name__ == "__main__":` guard makes the forkserver's start fail, for one).
        return "error", f"the child process could not be started: {type(exc).__name__}: {exc}"
    child_conn.close()
    stop.on_request(lambda: _wake(wake_writer))
    try:
        report = _wait(process, conn, wake_reader, stop, run.policy.stop_grace / US_PER_SECOND)
    finally:
        process.join()
        process.close()
        for end in (conn, wake_reader, wake_writer):
            end.close()
    outcome, error, exitcode = report
    return _died(exitcode, stop) if exitcode is not None else _reported(outcome, error, stop)


def _wake(writer: Connection) -> None:
    with contextlib.suppress(OSError):  # the run ended and closed it: nothing left to wake
        writer.send_bytes(b"stop")


_Report = tuple[str, "str | None", "int | None"]  # (outcome, error, exit code when no report came)


def _wait(
    process: multiprocessing.process.BaseProcess,
    conn: Connection,
    wake_reader: Connection,
    stop: StopSignal,
    grace_seconds: float,
) -> _Report:
    """Wait for the child's report and exit, ending it if a stop is asked."""
    report: dict[str, str | None] | None = None
    waiting: list[object] = [conn, process.sentinel, wake_reader]
    kill_at: float | None = None  # monotonic: when a terminated child is killed
    while True:
        timeout = None if kill_at is None else max(0.0, kill_at - time.monotonic())
        ready = wait(waiting, timeout)  # type: ignore[arg-type]  # connections and sentinels
        if conn in ready:
            waiting.remove(conn)
            try:
                report = json.loads(conn.recv_bytes())
            except (EOFError, OSError, ValueError):  # died before a whole report: judged by its exit
                report = None
        if wake_reader in ready:
            waiting.remove(wake_reader)
            _terminate(process, conn, stop.reason or "requested")
            kill_at = time.monotonic() + grace_seconds
        if process.sentinel in ready:
            process.join()
            if conn in waiting and conn.poll(0):  # sent its report, then exited: read it
                continue
            break
        if not ready and kill_at is not None:
            process.kill()
            kill_at = None
    if report is not None:
        return str(report["outcome"]), report["error"], None
    return "", None, process.exitcode if process.exitcode is not None else -signal.SIGKILL


def _terminate(process: multiprocessing.process.BaseProcess, conn: Connection, reason: str) -> None:
    try:
        conn.send_bytes(reason.encode())  # read by the child's SIGTERM handler (persched._engine.child)
    except OSError:  # it exited already
        return
    process.terminate()


def _reported(outcome: str, error: str | None, stop: StopSignal) -> tuple[str, str | None]:
    """Outcome and error text of a child's report."""
    if outcome == "unstarted":
        return "error", f"the job's child process could not start it: {error}"
    if outcome == "stopped" and stop.reason is not None:
        return "stopped", f"{stop_text(stop.reason)}\n{error}"
    return outcome, error


def _died(exitcode: int, stop: StopSignal) -> tuple[str, str | None]:
    """Outcome and error text of a child that exited without a report."""
    if exitcode < 0:
        try:
            how = f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with status {exitcode}"
    if stop.reason is not None:
        return "stopped", f"{stop_text(stop.reason)}; the child process {how}"
    return "error", f"the job's child process {how} before it reported an outcome"
