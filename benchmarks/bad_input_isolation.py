"""Do valid schedule() calls fail because another caller's input was bad?

`--valid` threads schedule valid jobs and `--bad` threads schedule ids with a
lone surrogate, all released together by one barrier, so their writes share
group commits. Prints one JSON line: how many valid calls failed, and what the
bad calls raised. `--url` picks the database (default: a new SQLite file).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import threading
from typing import Any

from benchmarks import _common as c


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--valid", type=int, default=160)
    p.add_argument("--bad", type=int, default=20)
    p.add_argument("--url", default=None)
    args = p.parse_args()
    from persched import JobScheduler

    url = args.url or f"sqlite:///{tempfile.mkdtemp(prefix='persched-bench-')}/bad.db"
    sched = JobScheduler(url)
    sched.jobs()  # migrate before the race
    ids = [f"ok-{i}" for i in range(args.valid)] + [f"bad-{i}\udc80" for i in range(args.bad)]
    barrier = threading.Barrier(len(ids))
    outcome: dict[str, str] = {}

    def call(job_id: str) -> None:
        barrier.wait(60)
        try:
            sched.schedule(job_id, "benchmarks.targets:tick", 10.0)
            outcome[job_id] = "ok"
        except Exception as exc:  # noqa: BLE001 - counted by type
            outcome[job_id] = type(exc).__name__

    threads = [threading.Thread(target=call, args=(job_id,)) for job_id in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for job_id in ids[: args.valid]:
        sched.deschedule(job_id)
    sched.shutdown()
    valid = collections.Counter(outcome.get(j, "hung") for j in ids[: args.valid])
    record: dict[str, Any] = {
        "workload": "bad_input_isolation",
        "dialect": url.split(":", 1)[0],
        "valid": args.valid,
        "valid_failed": args.valid - valid["ok"],
        "valid_failed_pct": round(100 * (args.valid - valid["ok"]) / args.valid, 1),
        "valid_outcomes": dict(valid),
        "bad_outcomes": dict(collections.Counter(outcome.get(j, "hung") for j in ids[args.valid :])),
    }
    c.emit(record)
    c.finish()


if __name__ == "__main__":
    main()
