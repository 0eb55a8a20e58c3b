"""Run every workload for persched, APScheduler 3.11 and the ceiling; print a markdown table.

Every measurement runs in a fresh subprocess (``python -m benchmarks.<workload>``),
so one system's threads, memory and caches never disturb another's readings.
Repetitions are interleaved (rep 1 of everything, then rep 2, ...) and the
table shows medians. Usage, from the repository root::

    python -m benchmarks.run --quick      # < 3 minutes, small sizes, 1 repetition
    python -m benchmarks.run              # the issue's sizes, 3 repetitions (~15 minutes)

Raw JSON lines, the table and (with matplotlib) a chart of lateness
distributions go to --out (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Step:
    """One measurement: a workload module, its arguments, and the systems it runs for."""

    module: str
    args: tuple[str, ...]
    systems: tuple[str, ...] = ("persched", "apscheduler3")
    timeout: float = 300.0
    key: tuple[str, ...] = field(default=())


def plan(quick: bool, nograce: bool, cache: str) -> list[Step]:
    """The measurements of a quick or a full run."""
    both = ("persched", "apscheduler3")
    if quick:
        thr = [("1000", "3", "1")]
        lat = ("1000", "3")
        idle = ("10000", "3")
        starts = ["10000"]
        churn = "2"
        ceiling = "2"
    else:
        thr = [("1000", "10", "3"), ("10000", "10", "3")]
        lat = ("1000", "10")
        idle = ("100000", "20")
        starts = ["100000", "1000000"]
        churn = "10"
        ceiling = "10"
    steps: list[Step] = []
    for jobs, window, warmup in thr:
        args = ("--jobs", jobs, "--window", window, "--warmup", warmup)
        steps.append(Step("throughput", args, both, key=("throughput", jobs)))
        if nograce and jobs == "1000":
            steps.append(
                Step("throughput", (*args, "--aps-grace", "none"), ("apscheduler3",), key=("throughput", jobs))
            )
    args = ("--jobs", lat[0], "--window", lat[1], "--samples")
    steps.append(Step("lateness", args, both, key=("lateness", lat[0])))
    if nograce:
        steps.append(Step("lateness", (*args, "--aps-grace", "none"), ("apscheduler3",), key=("lateness", lat[0])))
    steps.append(Step("idle", ("--jobs", idle[0], "--window", idle[1]), both, key=("idle", idle[0])))
    steps += [
        Step("startup", ("--jobs", jobs, "--cache", cache), both, timeout=900, key=("startup", jobs)) for jobs in starts
    ]
    steps.append(Step("churn", ("--window", churn), both, key=("churn", "4 threads")))
    for batch in ("1", "100"):
        args = ("--window", ceiling, "--batch", batch)
        steps.append(Step("ceiling", args, ("ceiling",), key=("ceiling", batch)))
    return steps


def run_step(step: Step, system: str) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its JSON record."""
    cmd = [sys.executable, "-m", f"benchmarks.{step.module}", *step.args]
    if system != "ceiling":
        cmd += ["--system", system]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=step.timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"workload": step.module, "system": system, "error": f"timed out after {step.timeout} s"}
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not records:
        tail = proc.stderr.strip().splitlines()[-3:]
        return {"workload": step.module, "system": system, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    record: dict[str, Any] = records[-1]
    record["elapsed_s"] = round(time.monotonic() - started, 1)
    return record


def label(record: dict[str, Any]) -> str:
    """The table column a record belongs to."""
    if record.get("misfire_grace_time") == "none":
        return "apscheduler3-nograce"
    return str(record["system"])


# (workload, metric key, row title, higher_is_better)
METRICS: list[tuple[str, str, str, bool]] = [
    ("throughput", "runs_per_s", "runs/s", True),
    ("throughput", "fraction_of_offered", "fraction of offered slots run", True),
    ("throughput", "cpu_s_per_1000_runs", "CPU s per 1,000 runs", False),
    ("lateness", "missed", "missed slots", False),
    ("lateness", "lateness_ms_p50", "lateness p50 ms", False),
    ("lateness", "lateness_ms_p99", "lateness p99 ms", False),
    ("lateness", "lateness_ms_max", "lateness max ms", False),
    ("idle", "cpu_percent", "CPU % (one core = 100)", False),
    ("startup", "startup_s", "fresh process -> first run, s", False),
    ("startup", "start_call_s", "constructor + start(), s", False),
    ("startup", "rss_per_job_bytes", "RSS bytes per job", False),
    ("churn", "ops_per_s", "schedule+deschedule ops/s", True),
    ("ceiling", "updates_per_s", "claim UPDATEs/s", True),
]


def median(values: list[float]) -> float | None:
    """Median of the numbers (None if there are none)."""
    return statistics.median(values) if values else None


def fmt(value: float | None) -> str:
    """A number for the table."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def table(records: list[dict[str, Any]]) -> str:
    """The markdown table of medians, ratios and fractions of the ceiling."""
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        if "error" in r:
            continue
        key = (r["workload"], str(r.get("batch", r.get("jobs"))) if r["workload"] == "ceiling" else str(r["jobs"]))
        groups.setdefault(key, {}).setdefault(label(r), []).append(r)
    ceilings = {
        batch: median([r["updates_per_s"] for r in by.get("ceiling", [])])
        for (w, batch), by in groups.items()
        if w == "ceiling"
    }
    nograce = any("apscheduler3-nograce" in by for by in groups.values())
    head = ["workload", "metric", "persched", "APScheduler 3.11", "persched / APS"]
    if nograce:
        head += ["APS grace=None", "persched / APS(None)"]
    head += ["persched / ceiling 1/txn", "persched / ceiling 100/txn", "n"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for workload, metric, title, higher in METRICS:
        for (w, size), by in groups.items():
            if w != workload:
                continue

            def med(system: str, by: dict[str, list[dict[str, Any]]] = by, metric: str = metric) -> float | None:
                return median([r[metric] for r in by.get(system, []) if r.get(metric) is not None])

            if workload == "ceiling":
                what = f"ceiling, {size} per transaction"
                cells = [what, title + " ↑", "-", "-", "-"] + (["-", "-"] if nograce else [])
                cells += ["-", "-", str(len(by.get("ceiling", [])))]
                cells[2] = fmt(med("ceiling"))
                lines.append("| " + " | ".join(cells) + " |")
                continue
            p, a = med("persched"), med("apscheduler3")
            what = f"{workload} {int(size):,} jobs" if size.isdigit() and int(size) else workload
            cells = [what, title + (" ↑" if higher else " ↓"), fmt(p), fmt(a), ratio(p, a)]
            if nograce:
                n = med("apscheduler3-nograce")
                cells += [fmt(n), ratio(p, n)]
            per_ceiling = metric in ("runs_per_s", "ops_per_s")
            cells += [ratio(p, ceilings.get("1")) if per_ceiling else "-"]
            cells += [ratio(p, ceilings.get("100")) if per_ceiling else "-"]
            cells.append(str(len(by.get("persched", []))))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(a: float | None, b: float | None) -> str:
    """a / b for the table ('-' if undefined)."""
    if a is None or b is None or b == 0:
        return "-" if not (a == 0 and b == 0) else "="
    return f"{a / b:.2f}x"


def notes(records: list[dict[str, Any]]) -> list[str]:
    """Errors, warnings and stuck threads worth a look."""
    out = []
    for r in records:
        what = f"{r.get('workload')} {r.get('jobs', r.get('batch', ''))} {label(r) if 'system' in r else ''}"
        if "error" in r:
            out.append(f"- {what}: ERROR {r['error']}")
        for level, count in (r.get("log_counts") or {}).items():
            first = (r.get("log_first") or {}).get(level, "")
            out.append(f"- {what}: {count} {level} log records, first: {first}")
        if r.get("errors"):
            out.append(f"- {what}: {r['errors']} calls raised, first: {r.get('first_error')}")
        if r.get("stuck_threads"):
            out.append(f"- {what}: {r['stuck_threads']} threads still busy at the end")
    return out


def chart(records: list[dict[str, Any]], path: str) -> bool:
    """Write a PNG of lateness distributions (empirical CDFs); False without matplotlib."""
    try:
        import matplotlib as mpl

        mpl.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series: dict[str, list[float]] = {}
    for r in records:
        if r.get("workload") == "lateness" and r.get("lateness_ms"):
            series.setdefault(f"{label(r)} ({r['jobs']:,} jobs)", []).extend(r["lateness_ms"])
    for name, values in sorted(series.items()):
        values.sort()
        n = len(values)
        ax.plot([max(v, 0.01) for v in values], [(i + 1) / n for i in range(n)], label=f"{name}, {n:,} runs")
    ax.set_xscale("log")
    ax.set_xlabel("start - scheduled slot (ms, log scale)")
    ax.set_ylabel("fraction of runs that ran")
    ax.set_title("Lateness of the slots that ran (missed slots are not in the curve)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def revision() -> str:
    """The measured commit, marked '+dirty' when persched/ has uncommitted changes.

    $PERSCHED_BENCH_REVISION overrides it (for a snapshot outside the repository).
    """
    if os.environ.get("PERSCHED_BENCH_REVISION"):
        return os.environ["PERSCHED_BENCH_REVISION"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "persched"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes and windows, 1 repetition (< 3 min)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 1 quick, 3 full)")
    p.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all)")
    p.add_argument("--aps-nograce", action="store_true", help="also run APScheduler with misfire_grace_time=None")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"), help="directory for outputs")
    p.add_argument("--cache", default=None, help="where start-up keeps its populated files (default: --out/cache)")
    args = p.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    os.makedirs(args.out, exist_ok=True)
    cache = args.cache or os.path.join(args.out, "cache")
    steps = [s for s in plan(args.quick, args.aps_nograce, cache) if args.only is None or s.module in args.only]
    records: list[dict[str, Any]] = []
    raw = os.path.join(args.out, "results.jsonl")
    t_start = time.monotonic()
    measured = revision()
    with open(raw, "w") as f:
        for rep in range(1, reps + 1):
            for step in steps:
                for system in step.systems:
                    record = run_step(step, system)
                    record["rep"] = rep
                    records.append(record)
                    f.write(json.dumps(record) + "\n")
                    f.flush()
                    short = {k: v for k, v in record.items() if k not in ("lateness_ms", "log_first")}
                    print(json.dumps(short), file=sys.stderr, flush=True)  # noqa: T201 - progress
    mode = "--quick" if args.quick else "full"
    command = " ".join(["python -m benchmarks.run", *sys.argv[1:]])
    header = (
        f"`{command}` ({mode}, medians of {reps}, {time.monotonic() - t_start:.0f} s, persched at {measured}) on "
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        "both systems SQLite WAL, synchronous=FULL"
    )
    text = header + "\n\n" + table(records)
    odd = notes(records)
    if odd:
        text += "\n\nNotes:\n" + "\n".join(odd)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    png = os.path.join(args.out, "lateness.png")
    if chart(records, png):
        text += f"\n\nLateness chart: {os.path.relpath(png, ROOT)}"
    print(text)  # noqa: T201 - the runner's output


if __name__ == "__main__":
    main()
