"""Running the command line as a user does: ``python -m persched ARGS`` in a child process.

The child is forked from a process that imported the command line already
(tests/support/cli_zygote.py says what that keeps and saves); a run whose
environment changes how the interpreter starts, or that another thread's run
is using that process meanwhile, is a real ``python -m persched``.

The child inherits nothing that would change its answer: no database, namespace
or token from the environment (``PERSCHED_DB``, ``PERSCHED_NAMESPACE``,
``PERSCHED_WEB_TOKEN``) and no table width (``COLUMNS``, ``LINES``: a test run's
own environment may hold them, pytest-xdist workers do), so stdout is a pipe
and tables are never cut unless a test asks for a width.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

__all__ = ["REPO", "RUN_TIMEOUT", "cli_env", "persched"]

REPO: Final = Path(__file__).resolve().parents[2]
RUN_TIMEOUT: Final = 60.0  # real seconds for one CLI process (the demo takes about 12 s)
_NOT_INHERITED: Final = ("PERSCHED_DB", "PERSCHED_NAMESPACE", "PERSCHED_WEB_TOKEN", "COLUMNS", "LINES")
_READ_AT_STARTUP: Final = ("PYTHON", "LC_", "LANG")  # prefixes: the interpreter reads them as it starts


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI child: this repository importable, nothing inherited that changes its output."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def persched(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m persched ARGS`` (stdout a pipe, not a terminal) and return the finished process."""
    command = [sys.executable, "-m", "persched", *args]
    child_env = cli_env(env)
    forked = _ZYGOTE.run(command, cwd or REPO, child_env, timeout)
    if forked is not None:
        return forked
    return subprocess.run(command, cwd=cwd or REPO, env=child_env, capture_output=True, text=True, timeout=timeout)


class _Zygote:
    """The client of one tests/support/cli_zygote.py process, started at the first run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._buffer = b""

    def run(
        self, command: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str] | None:
        """`command` run in a forked child; None if it must be a real process (module docstring)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._process is None or self._process.poll() is not None:
                self._start()
            if _startup_env(env) != _startup_env(self._env):
                return None
            return self._run(command, cwd, env, timeout)
        finally:
            self._lock.release()

    def _start(self) -> None:
        self._env = cli_env()
        self._buffer = b""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cli_zygote"],
            cwd=REPO,
            env=self._env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        atexit.register(self._stop, self._process)

    @staticmethod
    def _stop(process: subprocess.Popen[bytes]) -> None:
        # Killed, not told by the end of its input: a child forked from this process (a test's
        # os.fork()) holds that pipe open too, so the end might never come.
        process.kill()
        process.wait()

    def _run(
        self, command: list[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        assert self._process is not None
        assert self._process.stdin is not None
        deadline = time.monotonic() + timeout
        with tempfile.TemporaryDirectory(prefix="persched-cli-") as directory:
            out, err = Path(directory, "stdout"), Path(directory, "stderr")
            request = {"args": command[3:], "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            pid = self._answer(None)["pid"]
            try:
                code = self._answer(deadline)["code"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self._answer(None)
                raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text()) from None
            return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())

    def _answer(self, deadline: float | None) -> dict[str, int]:
        """The zygote's next line; TimeoutExpired once `deadline` (monotonic) passed without one."""
        assert self._process is not None
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                raise subprocess.TimeoutExpired("persched", 0.0)
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the CLI zygote (tests/support/cli_zygote.py) ended; its stderr says why")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key.startswith(_READ_AT_STARTUP)}


_ZYGOTE: Final = _Zygote()
