"""Workload 4, start-up: a fresh process with N persisted jobs, until it dispatches.

The parent fills (or reuses, with --cache) a SQLite file with N jobs an hour
away plus one probe job, makes the probe due now, notes ``time.time()`` and
launches a fresh interpreter. The child imports the library, starts the
scheduler and waits for the probe's first run. Reported:

- startup_s: parent's launch -> the probe's run started (interpreter, imports,
  schema check, loading the jobs, first claim);
- start_call_s: the scheduler construction + start() alone;
- rss_delta_mb, rss_per_job_bytes: RSS once dispatching, after gc, less RSS after
  imports (rss_mb: the process's whole RSS then), and that growth / N.
  Libraries (SQLAlchemy, Alembic, APScheduler) are imported before the first
  reading, so the figure is the state the scheduler keeps (plus SQLite's page
  cache and allocator slack). APScheduler 3 keeps its jobs in the store, not in
  memory, so its figure is near zero by design.

With ``--db`` (PostgreSQL or MariaDB), ``--intervals own`` gives each job an interval of its
own of 10-60 min and its first slot within one interval from `--lead` s (2 min) after the
fill began (a million such jobs offer about 480 slots a second), and ``--run-for S`` keeps the child
dispatching S seconds after the probe ran: ``rss_mb_over_run`` is its RSS
every S/10 s (flat, or growing with the jobs it has run), ``runs`` the runs
recorded meanwhile, ``slots_due`` the slots due by the last run's start (each job's
first slot and every interval after it), so ``runs / slots_due`` is the fraction run;
``fill_s`` the fill's time and ``slots_due_at_launch`` the slots already due when the
child was launched (the fill outlasted the lead: the child starts behind).

``--tracemalloc F`` (with ``--run-for``) says what grows: the child starts tracemalloc (F
frames a trace) once the probe ran, and at each RSS sample reduces a snapshot to its sizes by
file:line. ``tracemalloc`` in the output holds, per sample, the traced total and glibc's
``mallinfo2()`` (bytes in use, free in the heap, in mmapped blocks); the 15 lines that grew
most from the first sample to the last, each with its size at every sample (does it level
off?); and, with F > 1, the 5 tracebacks that grew most (F > 1 is slow at a million jobs).
``--tracemalloc-file P`` has the child rewrite that report into P at each sample, for a run
that does not finish. tracemalloc slows the process and
adds its own memory to the RSS: the RSS of a run without it is the figure of record.

    python -m benchmarks.startup --system persched --db postgresql+psycopg://... --jobs 1000000 --analyze \\
        --intervals own --run-for 120
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from datetime import datetime, timezone
from typing import Any

from benchmarks import _common as c
from benchmarks import targets

HOUR = 3600.0
PROBE = "probe"
PROBE_TARGET = "benchmarks.targets:probe"


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _mallinfo() -> dict[str, float] | None:
    """glibc's heap in MiB: in use, free inside it, in mmapped blocks (None off glibc < 2.33)."""
    try:
        call = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    call.restype = _MallInfo2
    info = call()
    return {
        k: round(getattr(info, f) / 2**20, 2)
        for k, f in (("used", "uordblks"), ("free", "fordblks"), ("mmap", "hblkhd"))
    }


class _Tracer:
    """tracemalloc from the probe's run on: per sample, sizes by file:line (the snapshot is dropped)."""

    TOP: int = 15

    def __init__(self, frames: int, file: str | None) -> None:
        self.frames = frames
        self.file = file
        self.filters = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        self.samples: list[dict[str, Any]] = []
        self.lines: list[dict[str, tuple[int, int]]] = []
        self.traces: list[dict[str, tuple[int, int]]] = []
        tracemalloc.start(frames)

    def sample(self, rss_mb: float) -> None:
        snap = tracemalloc.take_snapshot().filter_traces(self.filters)
        self.lines.append({str(s.traceback[0]): (s.size, s.count) for s in snap.statistics("lineno")})
        if self.frames > 1:
            self.traces.append(
                {"\n".join(map(str, s.traceback)): (s.size, s.count) for s in snap.statistics("traceback")}
            )
            del self.traces[1:-1]  # the first and the last
        del snap
        traced, peak = tracemalloc.get_traced_memory()
        self.samples.append(
            {
                "rss_mb": rss_mb,
                "traced_mb": round(traced / 2**20, 2),
                "peak_mb": round(peak / 2**20, 2),
                "malloc": _mallinfo(),
            }
        )
        if self.file:
            with open(self.file, "w") as f:
                json.dump(self.report(), f)

    def report(self) -> dict[str, Any]:
        first, last = self.lines[0], self.lines[-1]
        grew = sorted(last, key=lambda k: last[k][0] - first.get(k, (0, 0))[0], reverse=True)[: self.TOP]
        out: dict[str, Any] = {"frames": self.frames, "samples": self.samples}
        out["top_growth"] = [
            {
                "line": k,
                "grew_kib": round((last[k][0] - first.get(k, (0, 0))[0]) / 1024, 1),
                "blocks": last[k][1] - first.get(k, (0, 0))[1],
                "kib_by_sample": [round(s.get(k, (0, 0))[0] / 1024, 1) for s in self.lines],
            }
            for k in grew
        ]
        if self.traces:
            t0, t1 = self.traces[0], self.traces[-1]
            top = sorted(t1, key=lambda k: t1[k][0] - t0.get(k, (0, 0))[0], reverse=True)[:5]
            out["top_traceback_growth"] = [
                {"traceback": k.split("\n"), "grew_kib": round((t1[k][0] - t0.get(k, (0, 0))[0]) / 1024, 1)}
                for k in top
            ]
        return out


def _child(
    system: str, path: str, workers: int, timeout: float, run_for: float, trace: int, trace_file: str | None
) -> None:
    # Libraries first, so that RSS growth after this line is the scheduler's own state.
    stop: Any
    if system == "persched":
        import alembic.command  # noqa: F401 - imported up front, see the module docstring

        import persched._store.migrate  # noqa: F401 - idem
        from persched import JobScheduler

        gc.collect()
        rss0 = c.rss_bytes()
        t0 = time.time()
        scheduler = JobScheduler(path, workers=workers)
        scheduler.start()
        stop = scheduler.shutdown
    else:
        import apscheduler.executors.pool
        import apscheduler.jobstores.sqlalchemy
        import apscheduler.schedulers.background  # noqa: F401 - imported up front, see the docstring

        gc.collect()
        rss0 = c.rss_bytes()
        t0 = time.time()
        aps, _ = c.aps_scheduler(path, workers, "default")
        aps.start()

        def stop() -> None:
            aps.shutdown(wait=False)

    t1 = time.time()
    dispatched = targets.PROBED.wait(timeout)
    gc.collect()
    rss1 = c.rss_bytes()
    over_run = []
    tracer = _Tracer(trace, trace_file) if trace and run_for else None
    for _ in range(10 if run_for else 0):  # RSS while it dispatches (--run-for)
        time.sleep(run_for / 10)
        over_run.append(round(c.rss_bytes() / 2**20, 1))
        if tracer is not None:
            tracer.sample(over_run[-1])
    c.emit(
        {
            **({"tracemalloc": tracer.report()} if tracer is not None else {}),
            "child": True,
            "dispatched": dispatched,
            "start_call_s": round(t1 - t0, 4),
            "probe_at": targets.PROBE_AT[0] if targets.PROBE_AT else None,
            "rss_delta": rss1 - rss0,
            "rss": rss1,
            "rss_mb_over_run": over_run,
        }
    )
    stop()
    c.finish()


def _populate(system: str, path: str, jobs: int) -> None:
    now = time.time()
    rows = ((f"j{i}", HOUR, now + HOUR + 600 * c.phase(i)) for i in range(jobs))
    if system == "persched":
        c.persched_create(path)
        c.persched_populate(path, ((j, "benchmarks.targets:noop", iv, f) for j, iv, f in rows))
        c.persched_populate(path, [(PROBE, PROBE_TARGET, HOUR, now + HOUR)])
    else:
        c.aps_populate(path, ((j, "benchmarks.targets:noop", iv, f, ()) for j, iv, f in rows))


def _populate_server(url: str, jobs: int, analyze: bool, own_lead: float | None) -> None:
    """A PostgreSQL or MariaDB database (emptied first) with `jobs` jobs an hour away (or, with
    `own_lead`, 10-60 min each, the first slot `own_lead` s to one interval from now), filled in SQL from one
    row, the first of them the probe, due now; ANALYZEd or not (a table just filled)."""
    from sqlalchemy import text

    from benchmarks.claim_scale import _fill
    from persched._store.dialects import dialect_for

    store = _fill(url, jobs, interval=HOUR, analyze=analyze, namespace="default")
    at = dialect_for(store.engine).bind_instant
    now = int(time.time() * 1_000_000)
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE persched_jobs SET next_run_at = :later, first_run_at = :later WHERE job_id <> 'j0'"),
            {"later": at(now + int(HOUR * 1_000_000))},
        )
        if own_lead is not None:  # j<n>: 600-3599.996 s
            postgres = store.engine.dialect.name == "postgresql"
            integer = "BIGINT" if postgres else "SIGNED"
            n = f"CAST(SUBSTR(job_id, 2) AS {integer})"
            interval = f"600 + MOD({n}, 3000) + MOD({n}, 997) / 1000.0"
            lead = f"{own_lead:.0f}"
            offset = f"{lead} + MOD({n} * 7919, CAST((interval_seconds - {lead}) * 1000 AS {integer})) / 1000.0"
            first = (
                f":now + ({offset}) * INTERVAL '1 second'"
                if postgres
                else f"TIMESTAMPADD(MICROSECOND, CAST(({offset}) * 1000000 AS {integer}), :now)"
            )
            conn.execute(text(f"UPDATE persched_jobs SET interval_seconds = {interval}"))  # noqa: S608 - ours
            own = f"UPDATE persched_jobs SET next_run_at = {first}, first_run_at = {first} WHERE job_id <> 'j0'"  # noqa: S608
            conn.execute(text(own), {"now": at(now)})
        conn.execute(
            text(
                "UPDATE persched_jobs SET job_id = :probe, target = :target, next_run_at = :now, first_run_at = :now"
                " WHERE job_id = 'j0'"
            ),
            {"probe": PROBE, "target": PROBE_TARGET, "now": at(now)},
        )
    store.engine.dispose()


def main() -> None:
    p = c.parser(__doc__ or "")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--cache", default=None, help="directory to keep (and reuse) the populated files in")
    p.add_argument("--db", default=None, help="persched on a PostgreSQL or MariaDB URL (a database of its own)")
    p.add_argument("--analyze", action="store_true", help="with --db: ANALYZE the table once it is filled")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--intervals", choices=("hour", "own"), default="hour", help="with --db: 1 h each, or 10-60 min")
    p.add_argument("--lead", type=float, default=120.0, help="--intervals own: no first slot before this (s)")
    p.add_argument("--run-for", type=float, default=0.0, help="seconds to go on dispatching after the probe ran")
    p.add_argument("--tracemalloc", type=int, default=0, help="with --run-for: trace with this many frames")
    p.add_argument("--tracemalloc-file", default=None, help="with --tracemalloc: the report, rewritten at each sample")
    p.add_argument("--child", default=None, help=argparse_hidden())
    args = p.parse_args()
    c.quiet_logging()
    if args.child:
        _child(
            args.system,
            args.child,
            c.workers(args),
            args.timeout,
            args.run_for,
            args.tracemalloc,
            args.tracemalloc_file,
        )
        return

    if args.db:  # a server: filled anew each time (in SQL, seconds for a million rows), probe due now
        filling = time.time()
        _populate_server(args.db, args.jobs, args.analyze, args.lead if args.intervals == "own" else None)
        fill_s = time.time() - filling
        path = args.db
    elif args.cache:
        os.makedirs(args.cache, exist_ok=True)
        path = os.path.join(args.cache, f"startup-{args.system}-{args.jobs}.db")
        done = path + ".done"
        if not os.path.exists(done):
            path = c.db_path(args.cache, os.path.basename(path))
            _populate(args.system, path, args.jobs)
            open(done, "w").close()  # an empty marker file
    else:
        path = c.db_path(args.dir)
        _populate(args.system, path, args.jobs)
    when = time.time()
    if args.db:
        pass
    elif args.system == "persched":
        c.persched_probe_now(path, PROBE, when)
    else:
        c.aps_probe_now(path, PROBE, PROBE_TARGET, when)

    cmd = [sys.executable, "-m", "benchmarks.startup", "--system", args.system, "--workers", str(c.workers(args))]
    cmd += ["--child", path, "--timeout", str(args.timeout), "--run-for", str(args.run_for)]
    cmd += ["--tracemalloc", str(args.tracemalloc)]
    cmd += ["--tracemalloc-file", args.tracemalloc_file] if args.tracemalloc_file else []
    wait = args.timeout + args.run_for * (2 if args.tracemalloc else 1) + 60  # tracemalloc slows the child
    launched = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=wait, check=False)
    record: dict[str, Any] = {"workload": "startup", "system": args.system, "jobs": args.jobs}
    child = next((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")), None)
    if child is None or not child["dispatched"]:
        record.update(error=f"child exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    else:
        record.update(
            startup_s=round(child["probe_at"] - launched, 4),
            start_call_s=child["start_call_s"],
            rss_per_job_bytes=round(child["rss_delta"] / args.jobs, 1),
            rss_delta_mb=round(child["rss_delta"] / 2**20, 1),
            rss_mb=round(child["rss"] / 2**20, 1),
        )
        if args.run_for:
            record.update(rss_mb_over_run=child["rss_mb_over_run"])
            if "tracemalloc" in child:
                record.update(tracemalloc=child["tracemalloc"])
            if args.db:
                runs, due, behind = _runs_and_slots_due(args.db, launched)
                record.update(runs=runs, slots_due=due, fraction=round(runs / due, 4) if due else None)
                record.update(fill_s=round(fill_s, 1), slots_due_at_launch=behind)
    c.emit(record)
    c.finish()


def _runs_and_slots_due(url: str, launched: float) -> tuple[int, int, int]:
    """The runs recorded in the database behind `url`, the slots due by the last run's start, and
    those due by `launched` (a backlog the child started behind, if the fill outlasted the lead)."""
    from sqlalchemy import text

    from persched._store.db import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            runs = int(conn.execute(text("SELECT count(*) FROM persched_runs")).scalar_one())
            end = conn.execute(text("SELECT max(started_at) FROM persched_runs")).scalar_one()
            rows = conn.execute(
                text("SELECT first_run_at, interval_seconds FROM persched_jobs WHERE first_run_at <= :end"),
                {"end": end},
            ).all()
    finally:
        engine.dispose()
    start = datetime.fromtimestamp(launched, timezone.utc)
    start = start if end.tzinfo else start.replace(tzinfo=None)  # MariaDB's DATETIME: naive UTC

    def due_by(at: datetime) -> int:
        return sum(int((at - first).total_seconds() // interval) + 1 for first, interval in rows if first <= at)

    return runs, due_by(end), due_by(start)


def argparse_hidden() -> str:
    """Help text of the internal --child option."""
    return "internal: run as the measured child on this file"


if __name__ == "__main__":
    main()
