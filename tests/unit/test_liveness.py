"""persched._engine.liveness: a gone process on this host is proven gone; anything unsure is not.

"Provably dead" must never be wrong for a live instance: every doubt (another
host, boot, pid namespace or uid, a custom id, a malformed proof) answers
False, and the lease decides as before.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from persched._engine import liveness as _liveness
from persched._engine.liveness import default_instance_id, display_id, provably_dead
from tests.support.helpers import TIMEOUT

PRINT_ID = (
    "from persched._engine.liveness import default_instance_id as d; "
    "import sys; print(d(), flush=True); sys.stdin.read()"
)

linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


def _child() -> tuple[subprocess.Popen[str], str]:
    """A live child process and the instance id it would use."""
    child = subprocess.Popen([sys.executable, "-c", PRINT_ID], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def _end(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait(TIMEOUT)
    assert child.stdout is not None
    child.stdout.close()


@linux_only
def test_a_live_process_is_never_dead_and_a_gone_one_is() -> None:
    child, instance_id = _child()
    try:
        assert "~" in instance_id
        assert instance_id.split(":")[1] == str(child.pid)
        assert not provably_dead(instance_id)  # alive: the lease decides
    finally:
        _end(child)
    assert provably_dead(instance_id)  # exited and reaped: its pid is free or someone else's


@linux_only
def test_this_process_is_never_dead() -> None:
    assert not provably_dead(default_instance_id())


@linux_only
def test_a_reused_pid_is_a_different_process() -> None:
    # Our own pid with another start time: the process that had it ended before we started.
    base, _, proof = default_instance_id().partition("~")
    machine, start = proof.split(".")
    assert provably_dead(f"{base}~{machine}.{int(start) + 1}")


@linux_only
@pytest.mark.parametrize("part", ["host", "machine"])
def test_another_host_or_machine_hash_is_not_proven(part: str) -> None:
    child, instance_id = _child()
    _end(child)  # gone: only the mismatch below keeps it from being proven dead
    base, _, proof = instance_id.partition("~")
    host, pid, token = base.split(":")
    machine, start = proof.split(".")
    if part == "host":
        host = socket.gethostname() + "-other"  # another machine with its own pids
    else:
        machine = f"{int(machine, 16) ^ 1:016x}"  # another boot, pid namespace or uid
    assert not provably_dead(f"{host}:{pid}:{token}~{machine}.{start}")


@linux_only
@pytest.mark.parametrize(
    ("path", "other"),
    [
        ("/proc/sys/kernel/random/boot_id", "00000000-0000-0000-0000-000000000000\n"),  # a later boot
        ("namespace", "pid:[1]"),  # a container sharing the hostname and the kernel
        ("uid", ""),  # hidepid may hide another user's live processes
        ("/proc/self", "1"),  # a /proc that is not our pid namespace's
    ],
)
def test_a_process_seen_from_another_boot_namespace_or_uid_is_not_proven(
    monkeypatch: pytest.MonkeyPatch, path: str, other: str
) -> None:
    child, instance_id = _child()
    _end(child)
    assert provably_dead(instance_id)  # as seen from where it ran
    if path == "uid":
        monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 12345)
    elif path == "namespace":
        real_readlink = os.readlink
        monkeypatch.setattr(os, "readlink", lambda p: other if str(p) == "/proc/self/ns/pid" else real_readlink(p))
    elif path == "/proc/self":
        real_readlink = os.readlink
        monkeypatch.setattr(os, "readlink", lambda p: other if str(p) == path else real_readlink(p))
    else:
        real_read = _liveness._read
        monkeypatch.setattr(_liveness, "_read", lambda p: other if p == path else real_read(p))
    assert not provably_dead(instance_id)


@pytest.mark.parametrize(
    "instance_id",
    [
        "worker-1",  # a custom id
        f"{socket.gethostname()}:1:abcdef",  # the old format: no proof
        f"{socket.gethostname()}:x:abcdef~0123456789abcdef.1",
        f"{socket.gethostname()}:1:abcdef~not-a-proof",
        "",
    ],
)
def test_ids_without_a_valid_proof_are_not_proven(instance_id: str) -> None:
    assert not provably_dead(instance_id)


def test_tables_show_the_id_without_its_proof() -> None:
    assert display_id("vm:12:abcdef~0123456789abcdef.42") == "vm:12:abcdef"
    assert display_id("worker-1") == "worker-1"
