"""persched in a Flask application: ``Persched(app)``, or ``Persched()`` then ``init_app(app)`` in the app factory.

::

    from flask import Flask
    from persched import JobSpec
    from persched.integrations.flask import Persched

    persched = Persched(url="sqlite:///jobs.db", jobs=[JobSpec("sync", "myapp.tasks:sync", 60.0)])

    def create_app():
        app = Flask(__name__)
        persched.init_app(app)
        return app

A process that serves (``flask run``'s child, a gunicorn worker, ``app.run()``) starts its scheduler
at `init_app`; one that serves nothing starts none (`_placement`). ``flask persched ARGS`` is the
command line on the same database and namespace.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import TYPE_CHECKING, Any

import click
from flask.cli import FlaskGroup
from flask.helpers import get_debug_flag
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from .._engine.scheduler import JobScheduler
from .._model.models import DEFAULT_NAMESPACE
from ..errors import PerschedError
from ..web import dashboard
from ._command import run_cli
from ._dashboard import ProcessDashboard
from ._process import Placement, ProcessScheduler, gunicorn_preloading, job_set

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from _typeshed.wsgi import WSGIEnvironment
    from flask import Flask

    from .._interfaces.dashboard.auth import Authorize
    from .._model.declare import JobSpec
    from ..web import AwaitingDatabase, WebApp

__all__ = ["Persched"]


class Persched:
    """The Flask extension: one scheduler per serving process, the dashboard, ``flask persched``.

    Args:
        app: The application, or None to call `init_app` later (an app factory).
        url: The database (a SQLAlchemy URL or a SQLite file path); default: the
            app's ``PERSCHED_URL`` setting.
        jobs: The application's whole set of jobs (`persched.JobSpec`), declared with prune at each
            start, or a callable that returns it.
        namespace: The namespace of the application's jobs.
        dashboard_path: Mount the dashboard (`persched.web.dashboard`) at this path, e.g. ``"/persched"``.
        authorize: Who may act in the dashboard: called with the request's WSGI environ inside a
            Flask request context (``session`` and ``flask_login.current_user`` work), it returns a
            name or None. Without it the dashboard is read-only.
        allowed_hosts: The ``Host`` names the dashboard answers besides the loopback names
            (`persched.web.dashboard`'s `allowed_hosts`); default: the app's ``TRUSTED_HOSTS``
            setting. The dashboard checks them itself: Flask's own check never sees the mount.
        **options: Passed to `persched.JobScheduler` (``workers=``, ``lease_seconds=``, ...).

    The app's ``PERSCHED_START`` setting (default True) set to False starts no scheduler (test settings).
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        url: str | None = None,
        jobs: Sequence[JobSpec] | Callable[[], Sequence[JobSpec]] = (),
        namespace: str = DEFAULT_NAMESPACE,
        dashboard_path: str | None = None,
        authorize: Authorize | None = None,
        allowed_hosts: Sequence[str] | None = None,
        **options: Any,  # noqa: ANN401 - JobScheduler's keywords
    ) -> None:
        if dashboard_path is not None and not (dashboard_path.startswith("/") and len(dashboard_path) > 1):
            raise PerschedError(f"dashboard_path={dashboard_path!r}: pass a path such as '/persched'")
        self.url = url
        self.namespace = namespace
        self.dashboard_path = None if dashboard_path is None else dashboard_path.rstrip("/")
        self._jobs = jobs
        self._authorize = authorize
        self._allowed_hosts = allowed_hosts
        self._options = options
        self._processes: weakref.WeakKeyDictionary[Flask, ProcessScheduler] = weakref.WeakKeyDictionary()
        self._dashboards: weakref.WeakKeyDictionary[Flask, ProcessDashboard] = weakref.WeakKeyDictionary()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Register with `app`: the dashboard, ``flask persched``, and this process's scheduler where it serves.

        Raises:
            PerschedError: No database URL (neither ``url=`` nor ``PERSCHED_URL``).
        """
        url = self.url or app.config.get("PERSCHED_URL")
        if not url:
            raise PerschedError("Persched: no database; pass url= or set the app's PERSCHED_URL setting")
        process = ProcessScheduler(
            lambda: JobScheduler(url, namespace=self.namespace, **self._options),
            functools.partial(job_set, self._jobs),
            started=functools.partial(_keep, weakref.ref(app)),
        )
        self._processes[app] = process
        app.cli.add_command(_cli_command(url, self.namespace))
        if self.dashboard_path is not None:
            mounted = self._dashboards[app] = self._dashboard(app, url)
            app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]  # Flask's documented way
                app.wsgi_app, {self.dashboard_path: mounted}
            )
        if app.config.get("PERSCHED_START", True):
            process.place(_placement())
        else:
            process.place(Placement("nowhere", "the app's PERSCHED_START setting is False"))

    def scheduler(self, app: Flask) -> JobScheduler:
        """Return the started scheduler of `app` in this process.

        Raises:
            SchedulerStateError: This process runs no jobs; the message says why.
        """
        return self._processes[app].scheduler

    def shutdown(self, app: Flask, timeout: float | None = None) -> None:
        """Shut `app`'s scheduler in this process down, and close its dashboard's connections.

        persched does it at exit by itself.
        """
        self._processes[app].shutdown(timeout)
        dashboard = self._dashboards.get(app)
        if dashboard is not None:
            dashboard.close()
        app.extensions.pop("persched", None)

    def _dashboard(self, app: Flask, url: str) -> ProcessDashboard:
        authorize = self._authorize
        in_context: Authorize | None = None
        if authorize is not None:

            def in_context(environ: WSGIEnvironment) -> str | None:
                with app.request_context(environ):
                    return authorize(environ)

        def make() -> WebApp | AwaitingDatabase:  # on the first request: the app's secret is set by then
            secret = app.secret_key.encode() if isinstance(app.secret_key, str) else app.secret_key
            hosts = self._allowed_hosts if self._allowed_hosts is not None else app.config.get("TRUSTED_HOSTS")
            return dashboard(
                url, namespace=self.namespace, authorize=in_context, secret=secret, allowed_hosts=hosts or ()
            )

        return ProcessDashboard(make)


def _keep(app: weakref.ref[Flask], sched: JobScheduler) -> None:
    """Make `sched` the app's ``extensions["persched"]`` (`app` is a weak reference)."""
    found = app()
    if found is not None:
        found.extensions["persched"] = sched


def _placement() -> Placement:
    """Return where this process's jobs run, from what is loading the app."""
    if gunicorn_preloading():
        return Placement("forked workers", "gunicorn --preload: its master serves nothing, each worker runs the jobs")
    context = click.get_current_context(silent=True)
    if context is not None and isinstance(context.find_root().command, FlaskGroup):
        if context.info_name != "run":
            return Placement("nowhere", "a flask command other than 'run' serves nothing")
        reload = context.params.get("reload")
        if reload is None:
            reload = get_debug_flag()
        if reload and os.environ.get("WERKZEUG_RUN_MAIN") != "true":
            return Placement("nowhere", "flask run's reloader parent serves nothing; its child runs the jobs")
    return Placement("here", "this process serves the app")


def _cli_command(url: str, namespace: str) -> click.Command:
    @click.command(
        "persched",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def persched_command(args: tuple[str, ...]) -> None:
        """The persched command line on this app's database and namespace (flask persched --help)."""
        sys.exit(run_cli(args, url, namespace))

    return persched_command
