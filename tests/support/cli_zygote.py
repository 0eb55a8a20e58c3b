"""A process that has imported the command line once and forks a fresh ``python -m persched`` for each run.

Most of a CLI child's CPU is its imports (SQLAlchemy, Alembic, the command
line itself: about 0.4 s of the 0.6 s of ``persched jobs``), and the suite
starts several hundred of them. This process, started by `cli_run.persched`
once per test process, pays for the imports once; each request is then run in
a child forked from it, which is a process of its own in everything a test
can see: its own pid, working directory, environment, stdin (``/dev/null``),
stdout and stderr (files, so not terminals), signal handlers and exit code.
It runs ``persched/__main__.py`` as ``python -m persched`` would, with
``sys.argv`` and ``sys.path[0]`` as that command sets them.

What a fork cannot give, `cli_run.persched` does not ask of it: a request whose
environment changes how Python itself starts (``PYTHON*``, the locale) runs
as a real ``python -m persched``.

Protocol, one JSON line each way on stdin and stdout: a request ``{"args",
"cwd", "env", "stdout", "stderr"}`` (the last two: files to write), answered
``{"pid": ...}`` at once and ``{"code": ...}`` (as `subprocess` reports it:
negative for a signal) when the child ended. End of stdin ends this process.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import tempfile
import threading
import traceback

import alembic.command  # noqa: F401 - imported for the children: `migrate` and the schema checks use it
import sqlalchemy.dialects.sqlite  # noqa: F401 - as above: every default database is SQLite

import persched.cli  # the command line itself, with the store and the models it imports
import persched.cli.entry

MAIN = os.path.join(os.path.dirname(persched.cli.__file__), os.pardir, "__main__.py")


def _child(request: dict[str, object]) -> int:
    """In the forked child: become ``python -m persched ARGS`` and return its exit code."""
    cwd = str(request["cwd"])
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(dict(request["env"]))  # type: ignore[call-overload]  # JSON: str -> str
    tempfile.tempdir = None  # read TMPDIR again
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(str(request["stdout"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(str(request["stderr"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = [os.path.abspath(MAIN), *map(str, request["args"])]  # type: ignore[call-overload]
    sys.path[0] = cwd  # `python -m` puts the working directory first
    try:
        runpy.run_module("persched", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter does: a traceback on stderr, exit 1
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _exit(_child(request))
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"code": os.waitstatus_to_exitcode(status)})


def _exit(code: int) -> None:
    """End the child as the interpreter ends `python -m persched`, less the teardown of its modules.

    Non-daemon threads are joined and the atexit hooks run (persched shuts its schedulers down
    there), then the streams are flushed; a flush that fails exits 120, as Python does. Freeing
    every module (the interpreter's finalization) would cost this child 0.2 s and change nothing
    a test sees.
    """
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first at exit
    atexit._run_exitfuncs()
    flushed = [_flush(stream) for stream in (sys.stdout, sys.stderr)]
    os._exit(code if all(flushed) else 120)


def _flush(stream: object) -> bool:
    try:
        stream.flush()  # type: ignore[attr-defined]  # a text stream
    except (OSError, ValueError):
        return False
    return True


def _answer(answer: dict[str, int]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
