"""Child process of the multi-instance tests: one scheduler instance, real clock.

Usage::

    python -m tests.support.multi_child --url URL --instance ID --ready PATH --effects PATH
        [--lease 1.0] [--heartbeat 0.2] [--pickup 0.2] [--busy-timeout 5] [--workers 8] [--deadline 120]
        [--jobs N --interval S --start-in S --prefix j] [--blocker MARKER] [--share-work]

Starts a `JobScheduler` on URL with a small lease, heartbeat and pick-up delay,
optionally schedules jobs, writes its instance id to the readiness marker
`--ready` (atomically), and runs until SIGTERM (graceful shutdown, exit 0) or
until `--deadline` seconds passed (exit 3, so a forgotten child cannot linger).

The job targets record every run they execute by appending one line to the
side-effect file (one ``os.write`` on an ``O_APPEND`` descriptor, so lines of
concurrent processes never interleave)::

    job_id <TAB> generation <TAB> scheduled_for (ISO) <TAB> instance_id <TAB> pid

so that a test can check "no slot ran twice" independently of the database.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Final, NamedTuple

from persched import JobScheduler, current_run
from persched._interfaces.signals import StopSignals

__all__ = ["BLOCK_TARGET", "EFFECT_TARGET", "Effect", "block_first", "effect", "read_effects"]

EFFECT_TARGET: Final = "tests.support.multi_child:effect"
BLOCK_TARGET: Final = "tests.support.multi_child:block_first"
INSTANCE_ENV: Final = "PERSCHED_MULTI_INSTANCE"
BLOCK_SECONDS: Final = 120.0  # how long the blocking run hangs at most (the test kills it first)
SHUTDOWN_TIMEOUT: Final = 15.0
EXIT_DEADLINE: Final = 3


class Effect(NamedTuple):
    """One line of the side-effect file."""

    job_id: str
    generation: int
    scheduled_for: str
    instance_id: str
    pid: int


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def effect(effects: str) -> None:
    """Append this run's ``(job_id, generation, scheduled_for, instance, pid)`` to `effects`."""
    run = current_run()
    assert run is not None, "called outside a run"
    instance = os.environ.get(INSTANCE_ENV, "?")
    _append(
        effects,
        f"{run.job_id}\t{run.generation}\t{run.scheduled_for.isoformat()}\t{instance}\t{os.getpid()}\n",
    )


def block_first(marker: str, effects: str) -> None:
    """The first run anywhere creates `marker` (with its instance id) and hangs; later runs are `effect`."""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        effect(effects)
        return
    try:
        os.write(fd, os.environ.get(INSTANCE_ENV, "?").encode())
    finally:
        os.close(fd)
    # Stands for a long job; the test SIGKILLs this process meanwhile.
    time.sleep(BLOCK_SECONDS)


def read_effects(path: Path) -> list[Effect]:
    """Parse the side-effect file (missing: no effects)."""
    if not path.exists():
        return []
    out: list[Effect] = []
    for line in path.read_text().splitlines():
        job_id, generation, slot, instance, pid = line.split("\t")
        out.append(Effect(job_id, int(generation), slot, instance, int(pid)))
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="multi_child")
    p.add_argument("--url", required=True)
    p.add_argument("--instance", required=True)
    p.add_argument("--ready", required=True, help="readiness marker to write once started")
    p.add_argument("--effects", required=True, help="side-effect file of the job targets")
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--heartbeat", type=float, default=0.2)
    p.add_argument("--pickup", type=float, default=0.2)
    p.add_argument("--busy-timeout", type=float, default=5.0, help="busy_timeout_seconds (SQLite)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--deadline", type=float, default=120.0, help="exit on its own after this many seconds")
    p.add_argument("--jobs", type=int, default=0, help="schedule this many effect jobs")
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--start-in", type=float, default=None)
    p.add_argument("--prefix", default="j")
    p.add_argument("--blocker", default=None, help="schedule job 'blocker' (block_first) with this marker, at once")
    return p


def main(argv: list[str]) -> int:
    """Run one instance until SIGTERM or the deadline."""
    args = _parser().parse_args(argv)
    os.environ[INSTANCE_ENV] = args.instance
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.instance} %(levelname)s %(name)s: %(message)s",
    )
    stop = StopSignals()  # a handler that takes no lock (persched._interfaces.signals)
    with stop.installed():
        sched = JobScheduler(
            args.url,
            workers=args.workers,
            instance_id=args.instance,
            lease_seconds=args.lease,
            heartbeat_seconds=args.heartbeat,
            pickup_seconds=args.pickup,
            busy_timeout_seconds=args.busy_timeout,
        )
        sched.start()
        for i in range(args.jobs):
            sched.schedule(
                f"{args.prefix}{i}", EFFECT_TARGET, args.interval, args=(args.effects,), start_in=args.start_in
            )
        if args.blocker is not None:
            sched.schedule("blocker", BLOCK_TARGET, args.interval, args=(args.blocker, args.effects), start_in=0)
        ready = Path(args.ready)
        tmp = ready.with_name(ready.name + ".tmp")
        tmp.write_text(args.instance)
        tmp.replace(ready)
        finished = stop.wait(args.deadline)
        sched.shutdown(wait=True, timeout=SHUTDOWN_TIMEOUT)
    return 0 if finished else EXIT_DEADLINE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
