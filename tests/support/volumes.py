"""Small tmpfs volumes for the SQLite edge tests: a real "disk full" and a real read-only directory.

Mounting needs root (CI runs as root). Where the environment cannot mount,
the test skips with the reason, except when ``CI`` is set, where that is a
failure: these tests must not vanish silently from CI. Read-only is a
remount (``mount -o remount,ro``), which stops root's writes too, unlike
``chmod``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["remount", "tmpfs"]

MOUNT_TIMEOUT = 30.0  # seconds for one mount/umount call


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=MOUNT_TIMEOUT, check=False)


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` (``mount``'s syntax, e.g. "1M") on `where`; unmount afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    try:
        proc = _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where))
    except (OSError, subprocess.SubprocessError) as exc:
        proc = subprocess.CompletedProcess([], 1, "", str(exc))
    if proc.returncode != 0:
        reason = f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {proc.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}")
        pytest.skip(reason)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=MOUNT_TIMEOUT, check=False).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=MOUNT_TIMEOUT, check=False)


def remount(where: Path, mode: str) -> None:
    """Remount the tmpfs at `where` "ro" or "rw"."""
    proc = _mount("-o", f"remount,{mode}", str(where))
    assert proc.returncode == 0, proc.stderr
