"""Run one page's samples in the current directory, in order (tests/docs/samples.py says how).

Called as ``python _child.py BLOCKS.json``; prints one line per failing sample and exits 1 if any failed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from tests.docs.samples import console_matches, output_comments, prints_shown


def report(text: str) -> None:
    """One failing sample, for the parent test's message."""
    sys.stdout.write(text + "\n")


def main() -> int:
    page, blocks = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": "__sample__"}
    failures = 0
    for kind, code, line, path in blocks:
        where = f"{page}:{line}"
        printed = io.StringIO()
        try:
            if kind in ("file", "test"):
                target = Path(path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(code, encoding="utf-8")
                if kind == "file":
                    importlib.invalidate_caches()
                    name = path.removesuffix(".py").replace("/", ".")
                    with contextlib.redirect_stdout(printed):
                        if name in sys.modules:
                            importlib.reload(sys.modules[name])
                        else:
                            importlib.import_module(name)
            elif kind in ("snippet", "setup", "teardown"):
                with contextlib.redirect_stdout(printed):
                    exec(compile(code, where, "exec"), namespace)
            elif kind == "console":
                failures += console(where, code)
        except Exception:  # noqa: BLE001 - report every failing sample, then go on
            failures += 1
            report(f"{where}: the {kind} sample failed:\n{traceback.format_exc()}")
            continue
        shown = output_comments(code) if kind in ("file", "snippet") else []
        if not prints_shown(shown, printed.getvalue().splitlines()):
            failures += 1
            report(
                f"{where}: the output comments differ from what it printed\n--- shown\n"
                + "\n".join(shown)
                + "\n--- printed\n"
                + printed.getvalue()
            )
    return 1 if failures else 0


def console(where: str, code: str) -> int:
    """Run each ``$ persched ...`` line of a console block and compare its output with the lines shown."""
    failures = 0
    commands: list[tuple[str, list[str]]] = []
    for text in code.splitlines():
        if text.startswith("$ "):
            commands.append((text[2:], []))
        elif commands:
            commands[-1][1].append(text)
    for command, shown in commands:
        argv = shlex.split(command)
        if argv[0] == "persched":
            run = [sys.executable, "-m", "persched", *argv[1:]]
        elif len(argv) == 2 and argv[0] == "python" and Path(argv[1]).suffix == ".py":
            run = [sys.executable, argv[1]]  # a file of the page, written by its block above
        else:
            report(f"{where}: only persched commands and `python FILE.py` are run, not {command!r}")
            failures += 1
            continue
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PERSCHED_DB", "PERSCHED_NAMESPACE")}
        done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
        real = (done.stdout + done.stderr).splitlines()
        if not console_matches(shown, real):
            failures += 1
            report(f"{where}: $ {command}\n--- shown\n" + "\n".join(shown) + "\n--- real\n" + "\n".join(real))
    return failures


if __name__ == "__main__":
    sys.exit(main())
