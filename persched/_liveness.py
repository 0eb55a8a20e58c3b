"""Instance ids that let a restart on the same host see that their process is gone.

A default instance id is ``host:pid:random~proof``. The proof names the
process beyond doubt on Linux: ``boot.pidns.uid.start``, i.e. the kernel's
boot id (``/proc/sys/kernel/random/boot_id``, new at every boot), the inode
of its pid namespace (containers sharing a hostname and a kernel have their
own pid numbers), its uid, and its start time in clock ticks since boot
(``/proc/PID/stat`` field 22; a reused pid has a later one).

`provably_dead` says True only when all of that is checkable here and shows
the process gone: same host, same boot, same pid namespace, same uid (with
``hidepid`` another user's processes are invisible, so they never count as
gone), ``/proc`` that is this namespace's, and then no process with that pid,
or one that started at another time. Anything else -- another host, a custom
instance id, no ``/proc``, an unreadable field -- is "not proven", and the
lease decides as before (SPEC-multi: a live instance is never recovered).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from typing import Final

__all__ = ["default_instance_id", "provably_dead"]

_PROOF_SEPARATOR: Final = "~"
_BOOT_ID: Final = "/proc/sys/kernel/random/boot_id"
_BOOT_CHARS: Final = 16  # hex digits of the boot id kept (64 bits)
_PROOF: Final = re.compile(r"([0-9a-f]{16})\.(\d+)\.(\d+)\.(\d+)")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _start_ticks(pid: int | str) -> int | None:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks after boot."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "(comm)", which may hold spaces
    try:
        return int(fields[19])  # fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


def _here() -> tuple[str, int, int] | None:
    """(boot id, pid namespace inode, uid) of this process, or None if /proc cannot vouch for them."""
    boot = _read(_BOOT_ID)
    try:
        # /proc must be this pid namespace's: its "self" is our own pid.
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        namespace = re.fullmatch(r"pid:\[(\d+)\]", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return None
    if boot is None or namespace is None:
        return None
    boot = boot.strip().replace("-", "").lower()[:_BOOT_CHARS]
    if len(boot) != _BOOT_CHARS:
        return None
    return boot, int(namespace.group(1)), os.getuid()


def default_instance_id() -> str:
    """``host:pid:random``, plus ``~proof`` where the platform can give one (Linux)."""
    pid = os.getpid()
    base = f"{socket.gethostname()}:{pid}:{secrets.token_hex(3)}"
    here, start = _here(), _start_ticks("self")
    if here is None or start is None:
        return base
    boot, namespace, uid = here
    return f"{base}{_PROOF_SEPARATOR}{boot}.{namespace}.{uid}.{start}"


def provably_dead(instance_id: str) -> bool:
    """True only if `instance_id` is a process of this host, boot and pid namespace that is gone."""
    base, separator, proof = instance_id.partition(_PROOF_SEPARATOR)
    parts = base.split(":")
    matched = _PROOF.fullmatch(proof)
    if not separator or matched is None or len(parts) != 3 or not parts[1].isdigit():
        return False
    if parts[0] != socket.gethostname():
        return False
    here = _here()
    if here is None or (matched.group(1), int(matched.group(2)), int(matched.group(3))) != here:
        return False
    pid, started = int(parts[1]), int(matched.group(4))
    if pid == os.getpid():
        return _start_ticks("self") != started  # our pid, so that process ended before we began
    if not os.path.exists(f"/proc/{pid}"):
        return True  # same namespace, same uid: no process has that pid now
    now_started = _start_ticks(pid)
    # None: it exited between the two reads, or cannot be read: not proven.
    return now_started is not None and now_started != started
