"""A long-running CLI process (``persched run``, ``persched web``) whose output lines are read as they come."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tests.support.helpers import TIMEOUT, wait_until

REPO = Path(__file__).resolve().parents[2]


class Served:
    """``python -m persched ARGS`` in the background; `wait_for` finds a line on stdout or stderr."""

    def __init__(self, *args: str, cwd: Path, env_extra: dict[str, str] | None = None) -> None:
        env = {
            k: v for k, v in os.environ.items() if k not in ("PERSCHED_DB", "PERSCHED_WEB_TOKEN", "PERSCHED_NAMESPACE")
        }
        env.update(env_extra or {})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "persched", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.proc.stdout, self.proc.stderr)
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first output line matching `pattern` (bounded by TIMEOUT)."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            with self._lock:
                found[:] = [m for line in self.lines if (m := re.search(pattern, line))]
            return bool(found) or self.proc.poll() is not None

        wait_until(seen, message=f"a line matching {pattern!r}")
        assert found, f"the process ended ({self.proc.returncode}) without {pattern!r}: {self.lines}"
        return found[0]

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed after TIMEOUT)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(TIMEOUT)
        for reader in self._readers:
            reader.join(TIMEOUT)
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code
