"""The long-running verbs: ``run`` (a scheduler until SIGINT/SIGTERM; a second signal forces the exit) and ``web``.

`JobScheduler` is imported only here, so the read verbs never load it.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Final

from .. import _loggers
from .._interfaces.present import plural
from .._interfaces.signals import StopSignals, run_responsively
from ..errors import PerschedError
from .exits import EXIT_OK, CliError, one_line
from .output import say

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

    from .._engine.scheduler import JobScheduler
    from .._interfaces.http.server import Server

__all__ = ["SETUP_HOOK", "cmd_run", "cmd_web", "run_allowed_modules"]

logger = logging.getLogger(_loggers.CLI)
SETUP_HOOK: Final = "persched_setup"  # `run --import`: called with the started scheduler


def _import_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so a local module imports
    try:
        return importlib.import_module(name)
    except SystemExit as exc:  # a module that ends the process at import: say so, never exit silently
        raise CliError(f"cannot import module {name!r}: it called sys.exit({one_line(exc.code)})") from exc
    except Exception as exc:
        raise CliError(f"cannot import module {name!r}: {type(exc).__name__}: {one_line(exc)}") from exc


def run_allowed_modules(args: argparse.Namespace) -> list[str] | None:
    """Return `persched run`'s `allowed_modules`: the imported package and every ``--allow``.

    None (anything) with ``--allow-any-module``. A row's target is whatever its last writer put
    there, so by default only the application's own code runs (README, "Trust").
    """
    if args.allow_any_module:
        return None
    module: str = args.module or args.import_module  # either form (main() checks that one is given)
    return [module.partition(".")[0], *args.allow]


def cmd_run(args: argparse.Namespace) -> int:
    from .._engine.scheduler import JobScheduler  # not needed by the read commands

    module = _import_module(args.module)
    scheduler = JobScheduler(
        args.db, workers=args.workers, allowed_modules=run_allowed_modules(args), namespace=args.namespace
    )

    def on_signal(signum: int) -> None:
        # No lock and no logging here (persched._interfaces.signals); the main thread logs and shuts down.
        if stop.received:
            os.write(2, b"persched: second signal: exiting now, in-flight runs are abandoned\n")
            os._exit(128 + signum)

    stop = StopSignals(on_signal)
    with stop.installed():
        return _run_until_stopped(args, module, scheduler, stop)


def _run_until_stopped(args: argparse.Namespace, module: ModuleType, scheduler: JobScheduler, stop: StopSignals) -> int:
    """`persched run` from start() to a graceful shutdown at the first stop signal."""
    metrics_server = None
    try:
        try:
            if args.metrics_port is not None:
                metrics_server = _serve_metrics(scheduler, args)
            scheduler.start()
            setup = getattr(module, SETUP_HOOK, None)
            if callable(setup):
                try:
                    specs = setup(scheduler)
                    if specs is not None:  # the module's declared set, reconciled
                        scheduler.declare(specs, prune=True)
                except PerschedError:
                    raise
                except (Exception, SystemExit) as exc:  # SystemExit too: never a silent exit
                    raise CliError(
                        f"{args.module}.{SETUP_HOOK}() raised {type(exc).__name__}: {one_line(exc)}"
                    ) from exc
        except BaseException:
            scheduler.shutdown(wait=True)
            raise
        logger.info(
            "persched running %s from %s with %s; SIGINT or SIGTERM stops it",
            plural(len(scheduler.jobs()), "job"),
            args.module,
            plural(args.workers, "worker"),
        )
        # A timed wait keeps the main thread responsive to signals everywhere.
        while not stop.wait(1.0):
            pass
        name = signal.Signals(stop.received[0]).name if stop.received else "signal"
        logger.info("%s received: shutting down, in-flight runs finish (send it again to force exit)", name)
        run_responsively(scheduler.shutdown)  # a second signal forces the exit at once, wherever it lands
        logger.info("persched stopped")
        _warn_of_lingering_threads(args.module)
        return EXIT_OK
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()


def _warn_of_lingering_threads(module: str) -> None:
    """Name the non-daemon threads (the imported module's, say) that keep the process from exiting."""
    lingering = [
        t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if lingering:
        logger.warning(
            "threads started outside persched keep the process alive (%s; from %s?): a second SIGINT/SIGTERM ends it",
            ", ".join(lingering),
            module,
        )


def _serve_metrics(scheduler: JobScheduler, args: argparse.Namespace) -> Server:
    try:
        metrics = importlib.import_module("persched.metrics")  # the optional extra: only when asked for
    except ImportError as exc:
        raise CliError(f"--metrics-port: {exc}") from exc
    host, allowed = args.metrics_host, args.metrics_allowed_host
    server, _ = metrics.serve(scheduler, host, args.metrics_port, allowed_hosts=allowed)
    logger.info("metrics at http://%s:%d/metrics", host, server.server_port)
    return server  # type: ignore[no-any-return]  # imported by name


def cmd_web(args: argparse.Namespace) -> int:
    web = importlib.import_module("persched._interfaces.dashboard.serve")
    auth = importlib.import_module("persched._interfaces.dashboard.auth")
    token, warnings = auth.resolve_token(args.token, args.token_file, os.environ, web.ENV_TOKEN)
    for warning in warnings:
        logger.warning("web: %s", warning)
    limits = importlib.import_module("persched._interfaces.http.server").Limits(
        read_timeout=args.read_timeout, max_connections=args.max_connections
    )
    web.serve(
        args.db,
        args.host,
        args.port,
        token,
        lambda url: say(f"persched web: {url} (Ctrl-C stops it)"),
        namespace=args.namespace,
        allowed_hosts=args.allowed_host,
        limits=limits,
    )
    return EXIT_OK
