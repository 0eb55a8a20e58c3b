"""Time `persched jobs` (or another command) on a small database, hyperfine-style.

Warm-up runs, then N runs of each source tree, interleaved so a busy machine
weighs on them alike. Prints wall time (median, min) and CPU time (user+sys,
median) per run; CPU time is the steadier number on a shared machine::

    python -m benchmarks.cli_startup --db jobs.db            # this checkout
    python -m benchmarks.cli_startup --db jobs.db /tmp/old   # next to an older tree
    python -m benchmarks.cli_startup --db jobs.db --command migrate   # another command
    python -m benchmarks.cli_startup --db jobs.db --floor /tmp/old   # and what no tree can go below

The floor is a bare script that does what every read command must: import
SQLAlchemy with its SQLite dialect, open the file and SELECT the jobs; the
difference to it is what persched itself costs.

A tree is a source checkout (``git worktree add`` or ``git archive``); the
benchmark runs it through ``PYTHONPATH``, so a tree being edited meanwhile
is measured as it is at each run.

Byte code. An installed persched runs from ``.pyc`` files (pip compiles a
wheel at install), but with ``PYTHONDONTWRITEBYTECODE`` set -- as in some
sandboxes and CI images -- a source tree is compiled again at every run,
about 0.03 s of persched's own modules that no user pays. So the runs use a
byte-code cache of their own (``PYTHONPYCACHEPREFIX``, a temporary directory
filled by the warm-up runs; the trees are not written to);
``--no-bytecode-cache`` measures with the caller's environment as it is.

Find what is left with ``python -X importtime -m persched --db jobs.db jobs``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = "SQLAlchemy floor"  # the name of the floor's line
FLOOR_SCRIPT = (
    "import sys, sqlalchemy as sa; e = sa.create_engine('sqlite:///' + sys.argv[1]); "
    "c = e.connect(); c.execute(sa.text('SELECT * FROM persched_jobs')).all(); c.close(); e.dispose()"
)


def once(src: str, db: str, command: list[str], pycache: str | None) -> tuple[float, float]:
    """Run `persched COMMAND` once from `src` (or the floor script, for `FLOOR`); return (wall, cpu) seconds.

    With `pycache`, byte code is written to and read from that directory (see the module docstring).
    """
    env = dict(os.environ)
    if src == FLOOR:
        argv = ["-c", FLOOR_SCRIPT, db]
    else:
        env["PYTHONPATH"] = src
        argv = ["-m", "persched", "--db", db, *command]
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # cwd outside every tree: `python -m` puts the cwd first on sys.path, before PYTHONPATH.
    subprocess.run(
        [sys.executable, *argv],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Parse the arguments, run, print one line per source tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=[str(REPO)], help="source trees (default: this checkout)")
    parser.add_argument("--db", required=True, help="a migrated database with a few jobs")
    parser.add_argument("-n", type=int, default=20, help="runs per tree (20)")
    parser.add_argument("--command", default="jobs", help="the persched command and its arguments (jobs)")
    parser.add_argument("--floor", action="store_true", help="also time the SQLAlchemy floor (module docstring)")
    parser.add_argument(
        "--no-bytecode-cache",
        dest="bytecode_cache",
        action="store_false",
        help="run with the environment as it is (PYTHONDONTWRITEBYTECODE compiles every run)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="persched-pycache-") as pycache:
        _run(args, pycache if args.bytecode_cache else None)


def _run(args: argparse.Namespace, pycache: str | None) -> None:
    command = shlex.split(args.command)
    args.db = str(Path(args.db).resolve())
    trees = [*args.trees, *([FLOOR] if args.floor else [])]
    results: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for tree in trees:
        for _ in range(3):
            once(tree, args.db, command, pycache)
    for _ in range(args.n):
        for tree in trees:
            results[tree].append(once(tree, args.db, command, pycache))
    for tree, timings in results.items():
        walls = [wall for wall, _ in timings]
        cpus = [cpu for _, cpu in timings]
        print(  # noqa: T201 - a benchmark prints its numbers
            f"{tree}: wall median {statistics.median(walls):.3f} s, min {min(walls):.3f} s;"
            f" cpu median {statistics.median(cpus):.3f} s (n={args.n}"
            f"{'' if pycache is not None else ', no byte-code cache'})"
        )


if __name__ == "__main__":
    main()
