"""persched in a Django project: add ``"persched.integrations.django"`` to ``INSTALLED_APPS``.

Settings (all optional)::

    PERSCHED = {
        "URL": "postgresql+psycopg://app@db/app",  # default: Django's default database
        "NAMESPACE": "myproject",                 # default: "default"
        "JOBS": "myproject.schedules.JOBS",      # a list of JobSpec, or a callable that returns one
        "START": True,                            # False: web processes run no jobs (test settings, or
                                                  # a dedicated `manage.py persched run` process)
        "OPTIONS": {"workers": 4},                # JobScheduler's keywords
        "AUTHORIZE": "myproject.ops.who_may_act", # the dashboard: request -> who acts, or None
        "MAY_READ": "myproject.ops.may_read",     # the dashboard: request -> bool
        "DATABASE": "default",                    # the admin: the Django database alias of URL's tables
    }

Each process that serves starts its scheduler in ``AppConfig.ready`` (``runserver``'s child, each
gunicorn or uvicorn worker); ``runserver``'s autoreloader parent and other management commands start
none. ``python manage.py persched ARGS`` is the ``persched`` command line on these settings. persched's
own migrations make its tables, never Django's. `scheduler` returns the process's scheduler, for views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..._engine.scheduler import JobScheduler

__all__ = ["scheduler"]


def scheduler() -> JobScheduler:
    """Return this process's started scheduler.

    Raises:
        SchedulerStateError: This process runs no jobs (a management command, ``PERSCHED["START"]``
            False); the message says why.
    """
    from .apps import process  # the app registry imports apps.py; this module stays light

    return process.scheduler
