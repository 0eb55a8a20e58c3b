"""persched._liveness: a gone process on this host is proven gone; anything unsure is not (issue 15).

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

from persched._liveness import default_instance_id, provably_dead
from tests.support.helpers import TIMEOUT

PRINT_ID = (
    "from persched._liveness import default_instance_id as d; import sys; print(d(), flush=True); sys.stdin.read()"
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
    boot, namespace, uid, start = proof.split(".")
    assert provably_dead(f"{base}~{boot}.{namespace}.{uid}.{int(start) + 1}")


@linux_only
@pytest.mark.parametrize("part", ["host", "boot", "namespace", "uid"])
def test_anything_not_checkable_here_is_not_proven(part: str) -> None:
    child, instance_id = _child()
    _end(child)  # gone: only the mismatch below keeps it from being proven dead
    base, _, proof = instance_id.partition("~")
    host, pid, token = base.split(":")
    boot, namespace, uid, start = proof.split(".")
    if part == "host":
        host = socket.gethostname() + "-other"  # another machine with its own pids
    elif part == "boot":
        boot = f"{int(boot, 16) ^ 1:016x}"  # a previous boot: pids and start times mean nothing now
    elif part == "namespace":
        namespace = str(int(namespace) + 1)  # a container sharing the hostname and the kernel
    else:
        uid = str(int(uid) + 1)  # hidepid may hide another user's live processes
    assert not provably_dead(f"{host}:{pid}:{token}~{boot}.{namespace}.{uid}.{start}")


@pytest.mark.parametrize(
    "instance_id",
    [
        "worker-1",  # a custom id
        f"{socket.gethostname()}:1:abcdef",  # the old format: no proof
        f"{socket.gethostname()}:x:abcdef~0123456789abcdef.1.0.1",
        f"{socket.gethostname()}:1:abcdef~not-a-proof",
        "",
    ],
)
def test_ids_without_a_valid_proof_are_not_proven(instance_id: str) -> None:
    assert not provably_dead(instance_id)
