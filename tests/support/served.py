"""A long-running CLI process (``persched run``, ``persched web``) whose output lines are read as they come."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from tests.support.helpers import START_TIMEOUT, TIMEOUT, stop_gracefully, wait_until

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
        """The first output line matching `pattern`.

        Bounded by `START_TIMEOUT`, as the first lines come after a start-up that a busy machine
        slows; the wait ends at once if the process exits.
        """
        found: list[re.Match[str]] = []

        def seen() -> bool:
            with self._lock:
                found[:] = [m for line in self.lines if (m := re.search(pattern, line))]
            return bool(found) or self.proc.poll() is not None

        wait_until(seen, timeout=START_TIMEOUT, message=f"a line matching {pattern!r}")
        assert found, f"the process ended ({self.proc.returncode}) without {pattern!r}: {self.lines}"
        return found[0]

    def stop(self) -> int:
        """SIGTERM, then the exit code (`stop_gracefully`: a process that does not stop fails the test)."""
        try:
            return stop_gracefully(self.proc, "the served process", lambda: "\n".join(self.lines))
        finally:
            for reader in self._readers:
                reader.join(TIMEOUT)
            assert self.proc.stdout is not None
            assert self.proc.stderr is not None
            self.proc.stdout.close()
            self.proc.stderr.close()
