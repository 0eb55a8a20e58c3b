"""Instance ids that let a restart on the same host see that their process is gone.

A default id is ``host:pid:random~machine.start``: ``machine`` hashes the boot
id, the pid namespace's inode and the uid; ``start`` is the process's start time
in clock ticks (``/proc/PID/stat`` field 22), which a reused pid does not share.
`provably_dead` is True only when all of that is checkable here and shows the
process gone: the same host and machine hash (with ``hidepid`` another user's
processes are invisible, hence the uid), a ``/proc`` of this pid namespace, and
no process with that pid or one started at another time. Anything else is "not
proven", and the lease decides: a live instance is never recovered.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from typing import Final

__all__ = ["default_instance_id", "display_id", "provably_dead"]

_PROOF_SEPARATOR: Final = "~"
_BOOT_ID: Final = "/proc/sys/kernel/random/boot_id"
_MACHINE_CHARS: Final = 16  # hex digits of the machine hash (64 bits)
_PROOF: Final = re.compile(r"([0-9a-f]{16})\.(\d+)")


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


def _here() -> str | None:
    """The machine hash of this process (boot id, pid namespace, uid), or None if /proc cannot vouch for it."""
    boot = _read(_BOOT_ID)
    try:
        # /proc must be this pid namespace's: its "self" is our own pid.
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        namespace = re.fullmatch(r"pid:\[(\d+)\]", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return None
    if boot is None or not boot.strip() or namespace is None:
        return None
    key = f"{boot.strip().lower()}|{namespace.group(1)}|{os.getuid()}".encode()
    return hashlib.blake2b(key, digest_size=_MACHINE_CHARS // 2).hexdigest()


def default_instance_id() -> str:
    """``host:pid:random``, plus ``~proof`` where the platform can give one (Linux)."""
    pid = os.getpid()
    base = f"{socket.gethostname()}:{pid}:{secrets.token_hex(3)}"
    machine, start = _here(), _start_ticks("self")
    if machine is None or start is None:
        return base
    return f"{base}{_PROOF_SEPARATOR}{machine}.{start}"


def display_id(instance_id: str) -> str:
    """The instance id without its proof, for tables read by people."""
    return instance_id.partition(_PROOF_SEPARATOR)[0]


def provably_dead(instance_id: str) -> bool:
    """True only if `instance_id` is a process of this host, boot and pid namespace that is gone."""
    base, separator, proof = instance_id.partition(_PROOF_SEPARATOR)
    parts = base.split(":")
    matched = _PROOF.fullmatch(proof)
    if not separator or matched is None or len(parts) != 3 or not parts[1].isdigit():
        return False
    if parts[0] != socket.gethostname():
        return False
    if matched.group(1) != _here():
        return False  # another boot, pid namespace or uid, or /proc cannot tell
    pid, started = int(parts[1]), int(matched.group(2))
    if pid == os.getpid():
        return _start_ticks("self") != started  # our pid, so that process ended before we began
    if not os.path.exists(f"/proc/{pid}"):
        return True  # same namespace, same uid: no process has that pid now
    now_started = _start_ticks(pid)
    # None: it exited between the two reads, or cannot be read: not proven.
    return now_started is not None and now_started != started
