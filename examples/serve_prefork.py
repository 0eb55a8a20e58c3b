"""A minimal pre-fork WSGI server (gunicorn's model, standard library only) for `wsgi_app`.

The master binds one listening socket, forks N workers and only then does each
worker import the application, so each gets its own persched scheduler (never
start threads before ``fork()``). SIGTERM to the master stops the workers
gracefully; each worker's scheduler finishes its in-flight runs on exit.

    python -m examples.serve_prefork --workers 4 --port 8000
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

if TYPE_CHECKING:
    from types import FrameType


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _worker(sock: socket.socket, app_path: str) -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # atexit shuts the scheduler down
    module_name, _, attr = app_path.partition(":")
    app = getattr(importlib.import_module(module_name), attr)  # after the fork: one scheduler per worker
    server = WSGIServer(sock.getsockname(), _QuietHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_name, server.server_port = "127.0.0.1", sock.getsockname()[1]
    server.setup_environ()
    server.set_app(app)
    server.serve_forever(poll_interval=0.2)


def main(argv: list[str]) -> int:
    """Fork the workers and wait for them."""
    parser = argparse.ArgumentParser(prog="serve_prefork")
    parser.add_argument("--app", default="examples.wsgi_app:application")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (see --port-file)")
    parser.add_argument("--port-file", default=None, help="write the port here once the workers are forked")
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)
    pids = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _worker(sock, args.app)
            except SystemExit as exc:  # SIGTERM
                code = exc.code if isinstance(exc.code, int) else 0
            finally:
                # Never return into the master's code; run the exit hooks (persched's graceful
                # scheduler shutdown is one) as a normal exit would.
                atexit._run_exitfuncs()
                os._exit(code)
        pids.append(pid)

    def forward(signum: int, frame: FrameType | None) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(sock.getsockname()[1]))
        tmp.replace(args.port_file)  # atomic: a reader never sees a half-written port
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
