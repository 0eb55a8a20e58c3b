"""Several scheduler processes sharing one database: runs per second and what coordination costs.

N scheduler processes (``--instances 1 2 3 4``; each count measured on a
fresh database) share one database and one load, scheduled after they
started so that every process picks the jobs up. The callable is
`benchmarks.targets.noop`; every process runs a default `JobScheduler`
(``--workers`` changes its pool; the instances share the work). After `--warmup` seconds of slots, the
slots scheduled in the next `--window` seconds are measured; `--settle`
seconds later every process gets SIGTERM (graceful shutdown).

Two loads:

- ``--db sqlite`` (the default): a fresh SQLite file per count (WAL),
  `--jobs` 50 jobs at 0.1-0.3 s;
- ``--db postgresql+psycopg://...`` (or a MariaDB URL): the database is
  emptied before each count (every table of its ``public`` schema is
  dropped on PostgreSQL: give it a database of its own), and the load is
  `--jobs` jobs (2000 is the reference load) at intervals drawn uniformly
  from 0.1-1 s with a fixed seed (``--intervals random``);
- ``--intervals slow``: intervals of 30-120 s with first slots spread over
  one interval (a large, mostly idle table: ``--jobs 100000``), declared in
  one transaction, then analyzed (``ANALYZE persched_jobs``).

From ``persched_runs`` afterwards:

- ``offered``: the grid slots of every job that lie in the window;
- ``ran``: runs whose ``scheduled_for`` lies in the window (a slot coalesced
  into a later run has no run of its own, so it counts as not run);
- ``runs_per_s`` = ran / window, ``fraction_of_offered`` = ran / offered;
- ``started_per_s``: runs that started in the window, whatever their slot: what an instance
  that is behind runs (its slots of before the window included), where ``runs_per_s`` counts
  only the window's slots;
- ``lateness_ms`` p50/p99/max: ``started_at - scheduled_for`` of those runs
  (``started_at`` is the claim's commit: a run starts when its claim commits);
- ``ready_after_first_slot_s``, ``first_run_after_first_slot_s``: from the load's first slot
  to the moment every process had started, and to the first run (a slow load is declared
  before the processes start: positive, and the first slots wait for the processes);
- ``twice``: slots run more than once, over the whole history (must be 0);
- with ``--kill-at S``: instance ``i0`` gets SIGKILL `S` seconds into the window (its id
  cannot be proven dead, so the others wait a lease, 30 s, before its jobs get new owners), and
  ``killed`` describes the slots of its jobs (those it ran before the kill) due after the kill:
  ``offered``, ``fraction_of_offered``, ``lateness_ms`` p50/p99/max, ``late_over_1s_until_s``
  (how long after the kill the last of them more than a second late was due) and
  ``first_run_elsewhere_s`` p50/max (from the kill to each job's first run by another instance);
  the CPU figures then leave out the killed process;
- ``by_instance``: runs per process in the window;
- ``cpu_ms_per_run``: CPU seconds spent during the window by the instances
  and, for a server on this machine, by its processes (``postgres``,
  ``mariadbd``: read from /proc), per run in the window, in ms
  (``instances_cpu_ms_per_run`` and ``server_cpu_ms_per_run`` apart);
- ``db_per_run`` (PostgreSQL, MariaDB): the server's own counters over the
  window per run: transactions, rows inserted/updated/read, WAL or redo bytes;
  on MariaDB also the clients' statements and pings (round trips; its status counters
  are the whole server's, other clients' included). PostgreSQL counts a ping
  (``SELECT 1`` outside a transaction) as a transaction.

Prints one JSON line per measurement; with `--reps`, the counts are
interleaved (1 2 3 4 1 2 3 4 ...) so that a noisy machine weighs on all of
them alike, and a last line per count gives the medians and ``ratio``, the
median runs/s over that of the smallest count, and ``cpu_ratio``, the median
CPU per run over that of the smallest count.

    python -m benchmarks.multi_instance                                   # SQLite, 1 and 3 processes
    python -m benchmarks.multi_instance --instances 1 2 3 4 --reps 3
    python -m benchmarks.multi_instance --db postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        --jobs 2000 --intervals random --window 8 --instances 1 2 3 4 --reps 3
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from benchmarks import _common as c

if TYPE_CHECKING:
    from collections.abc import Callable

    Call = Callable[..., object]

REPO: Final = Path(__file__).resolve().parents[1]
TARGET: Final = "benchmarks.targets:noop"
CYCLE: Final = (0.1, 0.15, 0.2, 0.25, 0.3)  # the SQLite load's intervals
RANDOM_RANGE: Final = (0.1, 1.0)  # the server load's
SLOW_RANGE: Final = (30.0, 120.0)  # --intervals slow
START_TIMEOUT: Final = 60.0  # seconds for a process to start its scheduler
STOP_TIMEOUT: Final = 30.0  # seconds for a graceful shutdown
LEAD: Final = 2.0  # seconds from the last schedule() to the first slots
BEFORE_SHUTDOWN: list[Callable[[], None]] = []  # a child's, run on SIGTERM
# A slow load's first slots: after the processes started. Declaring 100,000 jobs, reading them
# back, ANALYZE and starting the processes took 40 s on a 2-core machine: with a lead of 15 s the
# processes started 25 s behind slots they never saw come due, a backlog of the harness's making.
SLOW_LEAD: Final = 60.0


def intervals(jobs: int, kind: str) -> dict[str, float]:
    """The load: `jobs` jobs, intervals cycling through 0.1-0.3 s, or drawn from 0.1-1 s or
    30-120 s (seed 19)."""
    if kind == "cycle":
        return {f"j{i}": CYCLE[i % len(CYCLE)] for i in range(jobs)}
    rng = random.Random(19)
    return {f"j{i}": round(rng.uniform(*(SLOW_RANGE if kind == "slow" else RANDOM_RANGE)), 3) for i in range(jobs)}


_TICK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SERVER_NAMES: Final = ("postgres", "mariadbd", "mysqld")


def _cpu_seconds(pid: int, thread: int | None = None) -> float:
    """utime + stime of a process, or of one of its threads (0 if it is gone or /proc is missing)."""
    try:
        stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _server_cpu_seconds() -> float:
    """CPU of every database server process on this machine (a server elsewhere counts 0)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if name in SERVER_NAMES:
                total += _cpu_seconds(int(entry.name))
    return total


def _db_counters(url: str) -> dict[str, float]:
    """The server's counters that say what the window cost it (see the module docstring)."""
    from sqlalchemy import text

    from persched._store.db import make_engine

    if url.startswith("sqlite"):
        return {}
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                row = conn.execute(
                    text(
                        "SELECT xact_commit, tup_inserted, tup_updated, tup_fetched + tup_returned,"
                        " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') FROM pg_stat_database"
                        " WHERE datname = current_database()"
                    )
                ).one()
                names = ("transactions", "rows_inserted", "rows_updated", "rows_read", "wal_bytes")
                return dict(zip(names, map(float, row), strict=True))
            status = dict(conn.execute(text("SHOW GLOBAL STATUS")).all())
            # MariaDB 10.11 has no Innodb_rows_*: the handler counters count the same row operations.
            keys = {
                "transactions": ("Com_commit",),
                "rows_inserted": ("Handler_write",),
                "rows_updated": ("Handler_update",),
                "rows_read": ("Handler_read_key", "Handler_read_next", "Handler_read_rnd_next"),
                "redo_bytes": ("Innodb_os_log_written",),
                "statements": ("Questions",),  # the clients' statements: round trips, but pings
                "pings": ("Com_admin_commands",),  # COM_PING (a pooled connection's check) among others
            }
            return {name: sum(float(status.get(key, 0)) for key in names) for name, names in keys.items()}
    finally:
        engine.dispose()


def count_claims(path: Path) -> None:
    """In this child only: count each claim transaction's entries and winners, and its wall time,
    and write them to `path` at exit (``--counts``: where an instance's time goes)."""
    import atexit
    import json

    from persched._store import Store
    from persched._store.records import Claim

    counts: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    for name in ("claim_runs", "finish_runs", *(n for n in ("claim_overdue",) if hasattr(Store, n))):
        original = getattr(Store, name)

        def counted(self: Store, *args: object, _name: str = name, _original: Call = original) -> object:
            t = time.perf_counter()
            result = _original(self, *args)
            seconds[_name] += time.perf_counter() - t
            counts[f"{_name}_calls"] += 1
            if _name == "claim_runs":
                results = cast("list[object]", result)
                counts["entries_tried"] += len(results)
                counts["entries_won"] += sum(isinstance(r, Claim) for r in results)
            return result

        setattr(Store, name, counted)

    # The dispatch path's statements by their first words, wall seconds and calls: which one a claim waits on.
    from persched._store import dialects

    statements: Counter[str] = Counter()
    statement_calls: Counter[str] = Counter()
    real_run = dialects.DriverCursor._run

    def timed_run(self: dialects.DriverCursor, sql: str, params: object, *, many: bool) -> None:
        t = time.perf_counter()
        try:
            real_run(self, sql, params, many=many)
        finally:
            name = " ".join(sql.split()[:4])[:48]
            statements[name] += time.perf_counter() - t
            statement_calls[name] += 1

    dialects.DriverCursor._run = timed_run  # type: ignore[method-assign]

    _count_dispatch(counts, seconds)

    def write() -> None:
        times = {f"{name}_s": round(total, 3) for name, total in seconds.items()}
        by_statement = {name: [round(total, 3), statement_calls[name]] for name, total in statements.most_common()}
        path.write_text(json.dumps({**counts, **times, "statements_s_calls": by_statement}))

    atexit.register(write)
    if os.environ.get("PERSCHED_BENCH_SAMPLE"):
        _sample(path.with_suffix(".samples"))


def _count_dispatch(counts: Counter[str], seconds: Counter[str]) -> None:
    """``--counts``: the dispatcher's cycles by the entries they claimed, and its waits: the wall
    seconds it waited with no worker free while entries were due (its claims not overlapped with
    the runs), and with workers free."""
    from persched._engine.dispatcher import Cycle, Dispatcher

    original = Dispatcher._next_step

    def next_step(self: Dispatcher) -> object:
        t = time.perf_counter()
        starved = self.handover.free == 0 and self.window.head_due(self._timebase.now())
        step = original(self)
        seconds["wait_no_worker" if starved else "wait_other"] += time.perf_counter() - t
        if isinstance(step, Cycle) and step.due:
            counts[f"batch_{len(step.due)}"] += 1
        return step

    Dispatcher._next_step = next_step  # type: ignore[method-assign]


def _sample(path: Path, every: float = 0.005) -> None:
    """A poor man's sampling profiler: every `every` seconds, the innermost persched frames of each
    thread that is in persched code; the most frequent stacks are written to `path` at exit."""
    import threading

    stacks: Counter[str] = Counter()
    me = threading.get_ident()

    def loop() -> None:
        while True:
            time.sleep(every)
            gc.disable()  # before 3.11.9, a collection inside _current_frames() can deadlock
            try:
                frames = sys._current_frames()
            finally:
                gc.enable()
            for ident, frame in frames.items():
                if ident == me:
                    continue
                names: list[str] = []
                f: Any = frame
                while f is not None and len(names) < 6:
                    filename = f.f_code.co_filename
                    if "persched" in filename or "sqlalchemy" in filename or "psycopg" in filename:
                        names.append(f"{Path(filename).stem}.{f.f_code.co_name}:{f.f_lineno}")
                    f = f.f_back
                stacks[" < ".join(names) or "(elsewhere)"] += 1

    def write() -> None:
        # CPU seconds by thread name (the workers' summed), from /proc: which thread spends the instance's CPU.
        cpu: Counter[str] = Counter()
        for thread in threading.enumerate():
            name = thread.name.rstrip("0123456789-_") or thread.name
            cpu[name] += _cpu_seconds(os.getpid(), thread.native_id)
        lines = [f"cpu_s {round(s, 2)} {name}" for name, s in cpu.most_common()]
        path.write_text("\n".join([*lines, *(f"{n} {s}" for s, n in stacks.most_common(60))]))

    threading.Thread(target=loop, daemon=True).start()
    BEFORE_SHUTDOWN.append(write)  # the scheduler's threads are gone at exit


def child(url: str, instance: str, ready: str, workers: int | None, counts: str | None) -> None:
    """One instance: start a scheduler, say so, run until SIGTERM."""
    from persched import JobScheduler

    c.quiet_logging()
    if counts is not None:
        count_claims(Path(counts))
    stopping = [False]

    def on_term(signum: int, frame: object) -> None:
        stopping[0] = True

    signal.signal(signal.SIGTERM, on_term)
    options: dict[str, Any] = {} if workers is None else {"workers": workers}
    sched = JobScheduler(url, instance_id=instance, **options)
    sched.start()
    Path(ready).write_text(instance)
    while not stopping[0]:
        signal.pause()  # woken by SIGTERM; no polling
    for hook in BEFORE_SHUTDOWN:
        hook()
    sched.shutdown(wait=True, timeout=STOP_TIMEOUT)
    if counts is None:
        c.finish(0)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _fresh(db: str, instances: int, directory: str) -> str:
    """A URL of an empty database for one measurement."""
    if db == "sqlite":
        path = Path(tempfile.mkdtemp(prefix=f"multi{instances}-", dir=directory)) / "jobs.db"
        return f"sqlite:///{path}"
    from sqlalchemy import MetaData, inspect, text

    from persched._store.db import make_engine

    engine = make_engine(db)
    with engine.begin() as conn:  # the views first: they depend on the tables (persched_job_states)
        quote = engine.dialect.identifier_preparer.quote
        for view in inspect(conn).get_view_names():
            conn.execute(text(f"DROP VIEW {quote(view)}"))
    meta = MetaData()
    meta.reflect(engine)
    meta.drop_all(engine)
    engine.dispose()
    return db


def _slots_in(first: float, interval: float, start: float, end: float) -> int:
    """How many slots ``first + k * interval`` (k >= 0) lie in ``[start, end)``."""
    lo = max(0, math.ceil((start - first) / interval - 1e-9))
    hi = math.ceil((end - first) / interval - 1e-9)
    return max(0, hi - lo)


def measure(
    instances: int,
    *,
    db: str,
    load: dict[str, float],
    window: float,
    warmup: float,
    settle: float,
    workers: int | None,
    directory: str,
    counts: bool = False,
    slow: bool = False,
    analyze: bool = False,
    kill_at: float | None = None,
) -> dict[str, Any]:
    """Run `instances` processes on a fresh database; the numbers of the module docstring."""
    from sqlalchemy import select

    from persched import JobScheduler
    from persched._store.db import make_engine
    from persched._store.schema import runs

    url = _fresh(db, instances, directory)
    children: list[subprocess.Popen[bytes]] = []
    setup = JobScheduler(url)
    setup.jobs()  # creates the schema before several processes race to
    # A slow load is stored before the processes start, which load it as a restarted fleet does
    # (picking 100,000 changes up at once would measure the change feed, not the steady state).
    first = _schedule(setup, load, slow) if slow else {}
    setup.shutdown()
    if analyze:
        _analyze(url)
    marks = Path(tempfile.mkdtemp(prefix="ready-", dir=directory))
    try:
        # The processes start first (so start-up costs no slots), then the jobs
        # get their first slots a little later: every process picks them up.
        for i in range(instances):
            cmd = [sys.executable, "-m", "benchmarks.multi_instance", "--child", url, f"i{i}", str(marks / f"i{i}")]
            if workers is not None:
                cmd += ["--workers", str(workers)]
            if counts:
                cmd += ["--counts", str(marks / f"i{i}.counts")]
            children.append(subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}))
        deadline = time.monotonic() + START_TIMEOUT
        for i in range(instances):
            while not (marks / f"i{i}").exists():
                if time.monotonic() > deadline or children[i].poll() is not None:
                    raise SystemExit(f"instance {i} did not start")
                time.sleep(0.05)
        ready = time.time()
        if not slow:
            sched = JobScheduler(url)
            first = _schedule(sched, load, slow)
            sched.shutdown()
        start = (max(time.time(), min(first.values())) if slow else max(first.values())) + warmup
        end = start + window
        time.sleep(max(0.0, start - time.time()))
        survivors = children[kill_at is not None :]  # the killed one stays readable (unreaped): not counted
        cpu_before = sum(map(_cpu_seconds, (p.pid for p in survivors))), _server_cpu_seconds()
        db_before = _db_counters(url)
        killed = None
        if kill_at is not None:
            time.sleep(max(0.0, start + kill_at - time.time()))
            children[0].kill()
            killed = time.time()
        time.sleep(max(0.0, end - time.time()))
        cpu_after = sum(map(_cpu_seconds, (p.pid for p in survivors))), _server_cpu_seconds()
        db_after = _db_counters(url)
        time.sleep(max(0.0, end + settle - time.time()))
    finally:
        for proc in children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in children:
            _reap(proc)
    engine = make_engine(url)
    with engine.connect() as conn:
        q = select(runs.c.job_id, runs.c.scheduled_for, runs.c.started_at, runs.c.instance_id, runs.c.run_now)
        rows = conn.execute(q.order_by(runs.c.run_id)).all()
    engine.dispose()
    counted = {
        f"i{i}": json.loads((marks / f"i{i}.counts").read_text())
        for i in range(instances)
        if counts and (marks / f"i{i}.counts").exists()  # a killed instance wrote none
    }
    parsed = [(r[0], r[1].timestamp(), r[2].timestamp(), r[3]) for r in rows if not r[4]]
    every = Counter((job_id, slot) for job_id, slot, _, _ in parsed)
    in_window = [r for r in parsed if start <= r[1] < end]
    slots = {(job_id, slot) for job_id, slot, _, _ in in_window}
    late = sorted((started - slot) * 1000 for _, slot, started, _ in in_window)
    offered = sum(_slots_in(first[job_id], iv, start, end) for job_id, iv in load.items())
    ran = max(1, len(slots))
    instances_cpu, server_cpu = (after - before for after, before in zip(cpu_after, cpu_before, strict=True))
    return {
        "workload": "multi_instance",
        "engine": url.split(":", 1)[0].split("+", 1)[0],
        "instances": instances,
        "jobs": len(load),
        "window_s": window,
        "offered": offered,
        "offered_per_s": round(offered / window, 1),
        "ran": len(slots),
        "runs_per_s": round(len(slots) / window, 1),
        "fraction_of_offered": round(len(slots) / offered, 4),
        "started_per_s": round(sum(1 for r in parsed if start <= r[2] < end) / window, 1),
        # From the first slot of the load: when every process had started, and the first run.
        "ready_after_first_slot_s": round(ready - min(first.values()), 1),
        "first_run_after_first_slot_s": round(min(r[2] for r in parsed) - min(first.values()), 1) if parsed else None,
        "lateness_ms": _lateness(late),
        "twice": sum(1 for n in every.values() if n > 1),
        "by_instance": dict(sorted(Counter(r[3] for r in in_window).items())),
        "cpu_ms_per_run": round((instances_cpu + server_cpu) * 1000 / ran, 4),
        "instances_cpu_ms_per_run": round(instances_cpu * 1000 / ran, 4),
        "server_cpu_ms_per_run": round(server_cpu * 1000 / ran, 4),
        "db_per_run": {name: round((db_after[name] - db_before[name]) / ran, 3) for name in db_before},
        **({"claims_by_instance": counted} if counts else {}),
        **({"killed": _killed(parsed, first, load, killed, end)} if killed is not None else {}),
    }


def _lateness(late: list[float]) -> dict[str, float | None]:
    """p50, p99 and max of `late` (sorted milliseconds)."""
    return {"p50": c.percentile(late, 50), "p99": c.percentile(late, 99), "max": late[-1] if late else None}


def _killed(
    parsed: list[tuple[str, float, float, str]],
    first: dict[str, float],
    load: dict[str, float],
    killed: float,
    end: float,
) -> dict[str, Any]:
    """``--kill-at``: what became of the slots of the killed instance's jobs due after the kill."""
    theirs = {job_id for job_id, slot, started, instance in parsed if instance == "i0" and started < killed}
    after = [r for r in parsed if r[0] in theirs and killed <= r[1] < end]
    late = sorted((started - slot) * 1000 for _, slot, started, _ in after)
    offered = sum(_slots_in(first[job_id], load[job_id], killed, end) for job_id in theirs)
    elsewhere: dict[str, float] = {}
    for job_id, _, started, instance in parsed:
        if job_id in theirs and instance != "i0" and started >= killed:
            elsewhere[job_id] = min(elsewhere.get(job_id, math.inf), started - killed)
    moved = sorted(elsewhere.values())
    over = [slot - killed for _, slot, started, _ in after if started - slot > 1.0]
    return {
        "jobs": len(theirs),
        "offered": offered,
        "fraction_of_offered": round(len({(r[0], r[1]) for r in after}) / max(1, offered), 4),
        "lateness_ms": _lateness(late),
        "late_over_1s_until_s": round(max(over), 1) if over else 0.0,
        "first_run_elsewhere_s": {"p50": c.percentile(moved, 50), "max": moved[-1] if moved else None},
    }


def _analyze(url: str) -> None:
    """Give the planner statistics of the freshly filled tables (autovacuum does, a minute later)."""
    from sqlalchemy import text

    from persched._store.db import make_engine

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("ANALYZE TABLE persched_jobs" if engine.dialect.name == "mysql" else "ANALYZE persched_jobs")
            )
    finally:
        engine.dispose()


def _schedule(sched: Any, load: dict[str, float], slow: bool) -> dict[str, float]:  # noqa: ANN401 - a JobScheduler
    """Schedule the load; return each job's first slot (epoch seconds). A slow load is declared in
    one transaction with first slots spread over one interval after `SLOW_LEAD`; the others get
    theirs after `LEAD`."""
    from persched import JobSpec

    if slow:
        rng = random.Random(30)
        specs = [JobSpec(job_id, TARGET, iv, start_in=SLOW_LEAD + rng.uniform(0, iv)) for job_id, iv in load.items()]
        sched.declare(specs)
        return {job.job_id: job.next_run_at.timestamp() for job in sched.jobs()}
    t0 = time.time() + LEAD + len(load) * 0.005  # room for the schedule() calls below
    return {
        job_id: sched.schedule(job_id, TARGET, iv, start_in=max(0.0, t0 - time.time())).next_run_at.timestamp()
        for job_id, iv in load.items()
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=3, metavar=("URL", "INSTANCE", "READY"), help=argparse.SUPPRESS)
    p.add_argument("--db", default="sqlite", help="'sqlite' (a fresh file per count) or a database URL")
    p.add_argument("--instances", type=int, nargs="+", default=[1, 3])
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument(
        "--intervals", choices=("cycle", "random", "slow"), default=None, help="0.1-0.3 s, 0.1-1 s or 30-120 s"
    )
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--workers", type=int, default=None, help="worker threads per process (default: the library's)")
    p.add_argument("--reps", type=int, default=1, help="repetitions, interleaved over the instance counts")
    p.add_argument("--dir", default=None, help="where the SQLite files go (default: a temp dir)")
    p.add_argument(
        "--counts",
        nargs="?",
        const="",
        default=None,
        help="count claims tried / won and the seconds spent in the store's claim and finish calls, per instance",
    )
    p.add_argument("--analyze", action="store_true", help="ANALYZE the jobs table once the load is stored")
    p.add_argument("--kill-at", type=float, default=None, help="SIGKILL instance i0 this many seconds into the window")
    args = p.parse_args()
    if args.child:
        child(*args.child, workers=args.workers, counts=args.counts or None)
        return
    directory = args.dir or tempfile.mkdtemp(prefix="persched-multi-")
    load = intervals(args.jobs, args.intervals or ("cycle" if args.db == "sqlite" else "random"))
    records: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(args.reps):
        for n in args.instances:
            record = measure(
                n,
                db=args.db,
                load=load,
                window=args.window,
                warmup=args.warmup,
                settle=args.settle,
                workers=args.workers,
                directory=directory,
                counts=args.counts is not None,
                slow=args.intervals == "slow",
                # A slow load is a large table just filled: its planner statistics first, as autovacuum
                # would give them a minute later (a test server may run without autovacuum).
                analyze=args.analyze or args.intervals == "slow",
                kill_at=args.kill_at,
            )
            records[n].append(record)
            c.emit(record)
    base = statistics.median(r["runs_per_s"] for r in records[min(records)])
    base_cpu = statistics.median(r["cpu_ms_per_run"] for r in records[min(records)])
    for n, reps in records.items():
        rate = statistics.median(r["runs_per_s"] for r in reps)
        cpu = statistics.median(r["cpu_ms_per_run"] for r in reps)
        c.emit(
            {
                "workload": "multi_instance",
                "summary": True,
                "engine": reps[0]["engine"],
                "instances": n,
                "reps": len(reps),
                "runs_per_s": rate,
                "fraction_of_offered": statistics.median(r["fraction_of_offered"] for r in reps),
                "p99_ms": statistics.median(r["lateness_ms"]["p99"] or 0.0 for r in reps),
                "twice": sum(r["twice"] for r in reps),
                "ratio": round(rate / base, 3) if base else None,
                "cpu_ms_per_run": cpu,
                "cpu_ratio": round(cpu / base_cpu, 3) if base_cpu else None,
            }
        )


if __name__ == "__main__":
    main()
