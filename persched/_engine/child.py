"""The child process of a run with ``executor="process"``: import the target, call it, report.

`persched._engine.processes` starts `main` by "forkserver" or "spawn", never by a
fork of the scheduler, so the child holds none of the parent's threads, locks or
connections. It reads the run as JSON, calls the target with the `RunContext`
set, and sends one JSON report through its pipe (``outcome``, ``error``). A stop
arrives as SIGTERM after its reason on the pipe: the handler sets ``stopping`` and
raises `persched.errors.RunStopped` in the job's main thread, so a sleeping job
ends at once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
from typing import TYPE_CHECKING, Any

from .._model.targets import resolve
from .._store.records import Claim
from ..errors import RunStopped
from .context import ACTIVE_RUN, ActiveRun
from .tracebacks import describe
from .workers import awaited, unwrapped

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from types import FrameType

__all__ = ["main"]


def main(conn: Connection, payload: str) -> None:
    """Run the job `payload` describes and send its report through `conn`."""
    try:
        report = _run(conn, json.loads(payload))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a stop asked now has nothing left to stop
    conn.send_bytes(json.dumps(report).encode())
    conn.close()


def _run(conn: Connection, run: dict[str, Any]) -> dict[str, str | None]:
    try:
        fn = resolve(run["target"], None if run["allowed_modules"] is None else tuple(run["allowed_modules"]))
        args, kwargs = json.loads(run["args_json"]), json.loads(run["kwargs_json"])
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("the stored args or kwargs are not a JSON array and object")
    except BaseException as exc:  # noqa: BLE001 - reported: the job never started
        return {"outcome": "unstarted", "error": f"{type(exc).__name__}: {exc}"}
    claim = Claim(
        job_id=run["job_id"],
        generation=run["generation"],
        target=run["target"],
        args_json=run["args_json"],
        kwargs_json=run["kwargs_json"],
        scheduled_for=run["scheduled_for"],
        started_at=run["started_at"],
        run_id=run["run_id"],
        run_now=run["run_now"],
        attempt=run["attempt"],
    )
    active = ActiveRun(claim, run["namespace"])
    ACTIVE_RUN.set(active)
    running = [True]  # the job is still in its call: only then does a stop raise into it

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        reason = conn.recv_bytes().decode() if conn.poll(0) else "requested"
        if active.stop.request(reason) and running[0]:
            raise RunStopped(reason)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            asyncio.run(awaited(result))
    except BaseException as exc:  # noqa: BLE001 - the job's failure is its report
        exc = unwrapped(exc)
        running[0] = False
        outcome = "stopped" if isinstance(exc, RunStopped) else "error"
        return {"outcome": outcome, "error": describe(exc, user_code=True)}
    finally:
        running[0] = False
    return {"outcome": "ok", "error": None}
