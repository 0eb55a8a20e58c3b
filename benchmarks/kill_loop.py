"""Instances killed over and over: every slot runs once, or is accounted for.

Three `tests.support.multi_child` instances (lease 1 s, heartbeat 0.2 s;
they share the work) run
``--jobs`` side-effect jobs at 0.1-0.3 s on one database. Every ``--every``
seconds one of them, picked at random, gets SIGKILL and a replacement starts
(a new instance id, as a supervisor's restart gives). With
``--restart-server CMD`` the command (e.g. ``"service postgresql restart"``)
runs once, halfway: only on a server that nothing else is using. After
``--seconds`` the jobs are descheduled and the survivors stopped gracefully.

The run history and the jobs' own side-effect file are then checked by
`tests.multi._cluster.check_once`: no slot ran twice in either, every "ok" run
left its side effect, every slot of each job's grid is a run or coalesced into
a later run by a late start. Printed as one JSON line: ``slots`` (grid slots
from each job's first slot to its last run), ``ran`` (runs), ``coalesced``
(slots without a run of their own), ``lost`` (runs a kill left, recorded
"lost" after a lease), ``kills``, ``twice`` (0, or the check raised).

    python -m benchmarks.kill_loop                                    # SQLite, 30 s, a kill every 3 s
    python -m benchmarks.kill_loop --db postgresql+psycopg://postgres@127.0.0.1:5432/bench_kill \\
        --seconds 60 --restart-server "service postgresql restart"
"""

from __future__ import annotations

import argparse
import random
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Final

from benchmarks import _common as c
from benchmarks.multi_instance import _fresh
from tests.multi._cluster import (
    check_once,
    cluster,
    deschedule_all,
    effects_of,
    fetch_runs,
    now_utc,
    schedule_jobs,
    wait_past,
)

INTERVALS: Final = (0.1, 0.15, 0.2, 0.25, 0.3)
INSTANCES: Final = 3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", default="sqlite", help="'sqlite' (a fresh file) or a database URL (emptied first)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--every", type=float, default=3.0, help="seconds between two kills")
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--restart-server", default=None, metavar="CMD", help="a shell command run once, halfway")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="persched-kill-"))
    url = _fresh(args.db, INSTANCES, str(tmp))
    jobs = {f"j{i}": INTERVALS[i % len(INTERVALS)] for i in range(args.jobs)}
    kills = restarts = 0
    with cluster(url, tmp, lease=1.0, heartbeat=0.2, pickup=0.2) as cl:
        live = cl.start(*(f"i{k}" for k in range(INSTANCES)))
        first = schedule_jobs(url, jobs, cl.effects, start_in=1.0)
        began = time.monotonic()
        restart_at = began + args.seconds / 2 if args.restart_server else None
        while (left := args.seconds - (time.monotonic() - began)) > 0:
            time.sleep(min(args.every, left))
            if restart_at is not None and time.monotonic() >= restart_at:
                subprocess.run(args.restart_server, shell=True, check=True)
                restarts, restart_at = restarts + 1, None
            if time.monotonic() - began >= args.seconds:
                break
            victim = live.pop(rng.randrange(len(live)))
            victim.kill()
            kills += 1
            replacement = cl.spawn(f"r{kills}")
            replacement.wait_ready()
            live.append(replacement)
        wait_past(url, list(jobs), now_utc() + timedelta(seconds=0.5))
        deschedule_all(url, list(jobs))
        cl.stop_all()
        effects = effects_of(cl)
    runs = fetch_runs(url)
    report = check_once(runs, effects, jobs, first, max_coalesced_fraction=1.0)
    c.emit(
        {
            "workload": "kill_loop",
            "engine": url.split(":", 1)[0].split("+", 1)[0],
            "seconds": args.seconds,
            "kills": kills,
            "server_restarts": restarts,
            "slots": report.slots,
            "ran": report.runs,
            "coalesced": report.coalesced,
            "coalesced_fraction": round(report.coalesced / report.slots, 4),
            "lost": report.lost,
            "twice": 0,
        }
    )


if __name__ == "__main__":
    main()
